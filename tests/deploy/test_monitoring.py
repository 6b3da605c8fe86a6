"""deploy/monitoring/: the alert rules pass promtool, and the dashboard and the rules query
only metrics that ``kubesage serve`` exports.

- ``alerts.yaml``: ``promtool check rules``, and ``promtool test rules`` on
  ``alerts.test.yaml`` (promtool comes with Debian's prometheus package, which ``make
  services`` installs; a missing one skips locally and fails under ``CI=true``);
  ``prometheusrule.yaml`` carries the same groups.
- Every metric name in a rule's or a panel's expression (and in the dashboard's
  variables) is one that ``/metrics`` shows, read from the registry the endpoint renders —
  so renaming a metric without the dashboard and the alerts fails here.
- ``grafana-dashboard.json`` is Grafana-shaped: unique panel ids, each panel with a
  data source, targets with unique refIds and an expression, a place on the 24-column
  grid, and only the template variables it defines.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

# Imported for what they register: the HTTP server's close reasons, the leader gauge.
import kubesage.core.k8s.http_server
import kubesage.core.k8s.leader  # noqa: F401
from kubesage.core.observability import metrics
from tests.services import missing

MONITORING = Path(__file__).resolve().parents[2] / "deploy" / "monitoring"
RULES = MONITORING / "alerts.yaml"
DASHBOARD = MONITORING / "grafana-dashboard.json"

PROMQL_WORDS = {
    "and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right",
    "bool", "offset", "inf", "nan",
}  # fmt: skip
SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
}
"""The series each metric type shows in the text format (a counter's TYPE line names
its ``_total`` series already)."""


PROMETHEUS_OWN = {"up"}
"""Series Prometheus writes itself for each target (what a down replica still shows)."""


def exported_names() -> set[str]:
    """Every series name ``GET /metrics`` can show, from its ``# TYPE`` lines (a labelled
    metric shows its TYPE before any series of it exists)."""
    content, _ = metrics.render()
    names = set()
    for line in content.decode().splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            base = name.removesuffix("_total") if kind == "counter" else name
            names.update(base + suffix for suffix in SUFFIXES.get(kind, ("",)))
    return names


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression (or a Grafana ``label_values`` query) reads."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range and subquery windows
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    text = re.sub(r"label_values\(([^,)]*),[^)]*\)", r"\1", text)  # (metric, label)
    text = re.sub(r"\$\w+", "", text)  # Grafana variables
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        word = match.group()
        followed = text[match.end() :].lstrip()
        if followed.startswith("(") or word.lower() in PROMQL_WORDS:
            continue  # a function or an aggregation, or a keyword
        if re.fullmatch(r"\d+[smhdwy]", word) or word[0].isdigit():
            continue
        names.add(word)
    return names


def rules() -> Iterator[dict[str, Any]]:
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        yield from group["rules"]


def dashboard() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return document


def panels() -> list[dict[str, Any]]:
    return [panel for panel in dashboard()["panels"] if panel["type"] != "row"]


def dashboard_queries() -> Iterator[tuple[str, str]]:
    """``(where, query)`` for every target and every query variable."""
    for panel in panels():
        for target in panel["targets"]:
            yield f"panel {panel['title']!r} target {target['refId']}", target["expr"]
    for variable in dashboard()["templating"]["list"]:
        if variable["type"] == "query":
            yield f"variable {variable['name']}", variable["query"]["query"]


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        missing("promtool (Debian's prometheus package; `make services` installs it)")
        raise AssertionError("unreachable")
    return found


def run_promtool(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), *arguments],
        cwd=MONITORING,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


# -- the rules -----------------------------------------------------------------------------


def test_promtool_checks_the_rules() -> None:
    done = run_promtool("check", "rules", RULES.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(list(rules()))} rules found" in done.stdout


def test_promtool_unit_tests_of_the_alerts_pass() -> None:
    done = run_promtool("test", "rules", "alerts.test.yaml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_the_issue_asks_for_these_alerts_and_each_says_how_bad_it_is() -> None:
    alerts = {rule["alert"]: rule for rule in rules()}
    for wanted in (
        "KubesageExtenderInternalErrors",
        "KubesageFallbacks",
        "KubesageStaleTelemetry",
        "KubesageLeaderLost",
        "KubesageLoopStalled",
        "KubesageDown",
        "KubesageTargetsMissing",
    ):
        assert wanted in alerts
    for name, rule in alerts.items():
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, name
        assert {"summary", "description"} <= set(rule["annotations"]), name


def test_the_prometheus_rule_carries_the_same_groups() -> None:
    wrapper = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    assert (wrapper["apiVersion"], wrapper["kind"]) == (
        "monitoring.coreos.com/v1",
        "PrometheusRule",
    )
    assert set(wrapper) == {"apiVersion", "kind", "metadata", "spec"}
    assert wrapper["metadata"]["name"] == "kubesage"
    assert wrapper["spec"] == yaml.safe_load(RULES.read_text())


# -- metric names --------------------------------------------------------------------------


def test_the_name_reader_finds_metrics_and_nothing_else() -> None:
    expr = (
        "histogram_quantile(0.99, sum by (endpoint, le) ("
        'rate(kubesage_request_duration_seconds_bucket{job=~"$job", handler=~"filter|bind"}'
        "[$__rate_interval]))) > 0.05 and on (job) "
        "max without (instance) (kubesage_leader) < 1 or vector(0)"
    )
    assert metric_names(expr) == {"kubesage_request_duration_seconds_bucket", "kubesage_leader"}
    assert metric_names('label_values(kubesage_cluster_nodes{a="b"}, job)') == {
        "kubesage_cluster_nodes"
    }
    # A renamed metric is caught: the name read is not among those exported.
    assert not metric_names("rate(kubesage_renamed_total[5m])") <= exported_names()


def test_the_exported_names_come_from_the_registry() -> None:
    names = exported_names()
    assert {
        "kubesage_errors_total",
        "kubesage_request_duration_seconds_bucket",
        "kubesage_loop_ticks_total",
        "kubesage_cluster_nodes",
        "kubesage_leader",
        "kubesage_http_connections_closed_total",
    } <= names
    assert "kubesage_errors" not in names  # a counter's series end in _total


@pytest.mark.parametrize("source", ["rules", "dashboard"])
def test_every_metric_queried_is_exported(source: str) -> None:
    queries = (
        [(rule["alert"], rule["expr"]) for rule in rules()]
        if source == "rules"
        else list(dashboard_queries())
    )
    exported = exported_names() | PROMETHEUS_OWN
    used: set[str] = set()
    for where, query in queries:
        names = metric_names(query)
        assert names, f"{where}: no metric in {query!r}"
        assert names <= exported, f"{where}: not exported: {sorted(names - exported)}"
        used |= names
    assert len(used) >= 8, sorted(used)


# -- the dashboard -------------------------------------------------------------------------


def test_the_dashboard_is_grafana_shaped() -> None:
    document = dashboard()
    assert {"title", "uid", "schemaVersion", "panels", "templating", "time"} <= set(document)
    assert isinstance(document["schemaVersion"], int)
    ids = [panel["id"] for panel in document["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    variables = {variable["name"] for variable in document["templating"]["list"]}
    for panel in document["panels"]:
        grid = panel["gridPos"]
        assert {"h", "w", "x", "y"} <= set(grid) and grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["type"] in {"timeseries", "stat"}, panel["title"]
        assert panel["datasource"]["type"] == "prometheus", panel["title"]
        assert panel["targets"], panel["title"]
        refs = [target["refId"] for target in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip(), panel["title"]
    everything = json.dumps(document)
    used = set(re.findall(r"\$\{?(\w+)", everything)) - {"__rate_interval", "__all"}
    assert used <= variables, f"undefined variables: {sorted(used - variables)}"


def test_the_dashboard_covers_the_parts_the_issue_names() -> None:
    rows = [panel["title"] for panel in dashboard()["panels"] if panel["type"] == "row"]
    assert rows == ["Extender", "Admission webhook", "Fallbacks", "Control loop", "HTTP limits"]
    used = set().union(*(metric_names(query) for _, query in dashboard_queries()))
    for name in (
        "kubesage_request_duration_seconds_bucket",
        "kubesage_errors_total",
        "kubesage_fallbacks_total",
        "kubesage_loop_ticks_total",
        "kubesage_loop_actions_total",
        "kubesage_loop_stale_ticks_total",
        "kubesage_http_connections_closed_total",
        "kubesage_leader",
    ):
        assert name in used, name
