"""Which kind of application spark-submit runs, and the memory overhead Spark gives it."""

from __future__ import annotations

import pytest

from kubesage.adapters.spark.app_kind import AppKind, app_kind_of, executor_overhead_mib
from kubesage.adapters.spark.conf import executor_pod_shape
from kubesage.adapters.spark.placement import ExecutorShape


@pytest.mark.parametrize(
    ("args", "kind"),
    [
        (
            [
                "--master",
                "k8s://https://api:6443",
                "--deploy-mode",
                "cluster",
                "app.py",
                "--rate",
                "5",
            ],
            AppKind.python,
        ),
        (["--py-files", "deps.zip", "local:///opt/job/main.py"], AppKind.python),
        (["--name=etl", "--verbose", "report.R"], AppKind.r),
        (["--class", "com.example.Etl", "--conf", "spark.x=y.py", "app.jar", "in.py"], AppKind.jvm),
        (["--supervise", "-v", "s3a://jobs/app.jar"], AppKind.jvm),
        ([], AppKind.jvm),
    ],
)
def test_the_main_resource_decides_as_spark_does(args: list[str], kind: AppKind) -> None:
    # An option's value (deps.zip, spark.x=y.py) is not the main resource; the first
    # argument that is neither is, and what follows it is the application's own.
    assert app_kind_of(args) is kind


def test_overhead_is_sparks_factor_of_the_memory_at_least_384_mib() -> None:
    assert executor_overhead_mib(16_384) == 1_638  # 10 %: (0.1 * 16384).toLong
    assert executor_overhead_mib(16_384, AppKind.python) == 6_553  # 40 % for PySpark
    assert executor_overhead_mib(16_384, AppKind.r) == 6_553
    assert executor_overhead_mib(1_024) == executor_overhead_mib(512, AppKind.python) == 384
    shape = ExecutorShape(4, 2, 8_192)
    assert executor_pod_shape(shape, AppKind.python).memory_mib == 8_192 + 3_276
    assert executor_pod_shape(shape).memory_mib == 8_192 + 819
