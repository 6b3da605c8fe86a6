"""A real local Spark run of the TPC-H-like job, shared by the Spark tests."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kubesage.adapters.spark import tpch_job
from kubesage.adapters.spark.cli import find_spark_submit

LOCAL_SPARK = [
    "--master",
    "local[2]",
    "--conf",
    "spark.driver.bindAddress=127.0.0.1",
    "--conf",
    "spark.driver.host=127.0.0.1",
    "--conf",
    "spark.ui.enabled=false",
]


def local_spark_args(log_dir: Path) -> list[str]:
    """spark-submit arguments for a local run that writes its event log to ``log_dir``."""
    return [
        *LOCAL_SPARK,
        "--conf",
        "spark.eventLog.enabled=true",
        "--conf",
        f"spark.eventLog.dir={log_dir.resolve().as_uri()}",
        tpch_job.__file__,
        "--scale",
        "40000",
    ]


def only_log(log_dir: Path) -> Path:
    logs = list(log_dir.iterdir())
    assert len(logs) == 1, logs
    return logs[0]


@pytest.fixture(scope="session")
def spark_event_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    log_dir = tmp_path_factory.mktemp("spark-events")
    done = subprocess.run(
        [find_spark_submit(), *local_spark_args(log_dir)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return only_log(log_dir)
