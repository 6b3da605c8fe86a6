"""The control loop's option checks (``kubesage serve`` / ``kubesage loop``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubesage.core.cli.loop_options import loop_settings
from kubesage.core.errors import InputError


def test_an_audit_log_that_is_a_directory_is_refused_naming_the_option(tmp_path: Path) -> None:
    with pytest.raises(InputError) as info:
        loop_settings(audit_log=tmp_path)
    assert str(info.value) == f"--audit-log {tmp_path}: cannot append to it: is a directory"


def test_an_audit_log_in_a_missing_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"^--audit-log .*: its folder does not exist$"):
        loop_settings(audit_log=tmp_path / "absent" / "audit.jsonl")


def test_an_audit_log_file_to_create_is_accepted(tmp_path: Path) -> None:
    settings = loop_settings(audit_log=tmp_path / "audit.jsonl")
    assert settings.audit_log == tmp_path / "audit.jsonl"


def test_a_metric_map_goes_with_prometheus_and_is_checked_up_front(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"^--metric-map goes with --prometheus"):
        loop_settings(metric_map=tmp_path / "map.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: MetricMap\nspec: [1, 2]\n")
    with pytest.raises(InputError, match=r"broken\.yaml"):
        loop_settings(prometheus="http://prometheus:9090", metric_map=broken)


def test_the_loop_queries_prometheus_with_the_map_it_is_given(tmp_path: Path) -> None:
    from kubesage.core.bounded_collector import BoundedCollector
    from kubesage.core.cli.loop_sources import telemetry_collectors
    from kubesage.core.paths import shipped_file
    from kubesage.core.telemetry.metric_map import SHIPPED_METRIC_MAP
    from kubesage.core.telemetry.prometheus import PrometheusCollector

    site = tmp_path / "site-map.yaml"  # a site's own copy (its node label, say)
    site.write_text(shipped_file(SHIPPED_METRIC_MAP).read_text())
    settings = loop_settings(prometheus="http://prometheus:9090", metric_map=site)
    (collector,) = telemetry_collectors(settings)
    assert isinstance(collector, BoundedCollector)
    assert isinstance(collector.source, PrometheusCollector)
    assert collector.source.metric_map.path == site
    (shipped,) = telemetry_collectors(loop_settings(prometheus="http://prometheus:9090"))
    assert isinstance(shipped, BoundedCollector)
    assert isinstance(shipped.source, PrometheusCollector)
    assert shipped.source.metric_map.path == shipped_file(SHIPPED_METRIC_MAP)


@pytest.mark.parametrize("url", ["http://", "prometheus:9090", "ftp://prometheus"])
def test_a_prometheus_that_is_not_an_http_url_is_refused(url: str) -> None:
    with pytest.raises(InputError, match=rf"^--prometheus '{url}' must be an http"):
        loop_settings(prometheus=url)
    assert loop_settings(prometheus="http://prometheus:9090/").prometheus == (
        "http://prometheus:9090"
    )
