"""``kubesage serve --embedded`` runs the control loop: /debug/loop, /healthz, /metrics;
and ``kubesage loop --once`` prints one tick."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
from typer.testing import CliRunner

from kubesage.core.cli.loop import loop_parts
from kubesage.core.cli.main import app
from kubesage.core.loop.settings import ReconcilerContext
from tests.core.k8s.test_serve_cli import serving


def test_embedded_serve_runs_the_loop(tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    expected = [r.name for r in loop_parts(ReconcilerContext()).reconcilers]
    options = (
        *("--embedded", "--nodes", "40", "--tick-s", "1", "--audit-log", str(audit)),
        *("--arrivals-per-s", "4"),
    )

    def binds(debug: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            a
            for a in debug["actions"]
            if a["reconciler"] == "forecast-placement" and a["action"] == "bind"
        ]

    with serving(*options) as url, httpx.Client(base_url=url) as http:
        deadline = time.monotonic() + 30.0
        debug = http.get("/debug/loop").json()
        while (debug["ticks"] < 3 or not binds(debug)) and time.monotonic() < deadline:
            time.sleep(0.5)
            debug = http.get("/debug/loop").json()
        assert debug["ticks"] >= 3
        # The arrivals were placed by the loop: bound, each with its reason.
        assert binds(debug) and {a["outcome"] for a in binds(debug)} == {"done"}
        assert all("scored" in a["explanation"] for a in binds(debug))
        assert debug["clock"] == "wall"
        assert debug["reconcilers"] == expected
        assert debug["forecaster"] == "last-value (cold start)"
        assert debug["actions"][0]["explanation"] == "forecaster: last-value (cold start)"
        health = http.get("/healthz")
        assert health.status_code == 200
        assert health.json()["forecaster"] == "last-value (cold start)"
        text = http.get("/metrics").text
        assert "kubesage_loop_ticks_total" in text
        assert "kubesage_loop_tick_seconds_count" in text
        assert "kubesage_loop_actions_total" in text
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    assert records and records[0]["reconciler"] == "loop"


def test_loop_once_prints_one_tick_as_json() -> None:
    result = CliRunner().invoke(
        app, ["loop", "--once", "--embedded", "--nodes", "10", "--dry-run", "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["tick"] == 1 and report["dry_run"] is True
    assert report["collectors"] == [
        {
            "name": "embedded",
            "ok": True,
            "stale": False,
            "age_s": report["collectors"][0]["age_s"],
            "detail": "",
        }
    ]
    assert report["forecaster"] == "last-value"


def test_loop_once_as_a_table_and_bad_options() -> None:
    runner = CliRunner()
    table = runner.invoke(app, ["loop", "--once", "--embedded", "--nodes", "10"])
    assert table.exit_code == 0, table.output
    assert "tick 1 (live)" in table.stdout and "forecaster last-value" in table.stdout
    bad = runner.invoke(app, ["loop", "--once", "--embedded", "--tick-s", "0"])
    assert bad.exit_code == 2 and "--tick-s must be a positive" in bad.output


def test_loop_once_exits_1_when_a_collector_failed() -> None:
    """The tick is printed in full, and the exit status says it did not go cleanly, so
    a script or CronJob running ``loop --once`` sees the failure."""
    options = ["loop", "--once", "--embedded", "--nodes", "10", "--dry-run"]
    unreachable = ["--prometheus", "http://127.0.0.1:1", "--format", "json"]
    result = CliRunner().invoke(app, options + unreachable)
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    assert [c["name"] for c in report["collectors"] if not c["ok"]] == ["prometheus"]
    assert "the tick did not go cleanly: collector prometheus failed" in result.stderr


def test_loop_refuses_embedded_options_when_it_would_run_on_a_live_cluster(
    tmp_path: Path,
) -> None:
    """--nodes and --fill describe the embedded cluster: given with a kubeconfig, the run
    would act on the live cluster instead, so it is refused before anything connects."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\nusers: [{name: u, user: {}}]\n"
    )
    options = ["loop", "--once", "--kubeconfig", str(kubeconfig), "--nodes", "20", "--fill", "0.5"]
    result = CliRunner().invoke(app, options)
    assert result.exit_code == 2, result.output
    assert "--nodes, --fill only apply to the embedded cluster (--embedded)" in result.output


def test_an_error_naming_a_bracketed_path_prints_it_as_written(tmp_path: Path) -> None:
    """Error messages are plain text: "[red]" in a file name is not rich markup."""
    config = tmp_path / "exp[red].yaml"
    config.write_text("kind: Nonsense\n")
    result = CliRunner().invoke(app, ["simulate", "--config", str(config)])
    assert result.exit_code == 2
    assert "exp[red].yaml" in result.output
