"""``kubesage topology discover`` and ``show`` end to end (real subprocesses)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import Result
from typer.testing import CliRunner

from kubesage.core.cli.topology import topology_app
from kubesage.core.topology.graph import DRTG
from tests.core.topology.test_discovery import NODES

CONFIGS = Path(__file__).resolve().parents[3] / "configs" / "topologies"


def kubesage(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kubesage.core.cli", "topology", *args],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=120,
        check=False,
    )


def test_discover_writes_a_topology_that_loads_and_shows(tmp_path: Path) -> None:
    templates = tmp_path / "templates.yaml"
    templates.write_text(
        (CONFIGS / "dgx-h100-pod.yaml").read_text().replace("dgx-h100", "dgx"), "utf-8"
    )
    nodes = json.dumps({"kind": "NodeList", "items": NODES})
    out = tmp_path / "topology.yaml"
    done = kubesage("discover", "-", "--templates", str(templates), "--out", str(out), stdin=nodes)
    assert done.returncode == 0, done.stderr
    assert "4 node(s) in 3 rack(s)" in done.stderr
    graph = DRTG.from_yaml(out)
    assert sorted(graph.node_names) == ["cpu-d", "dgx-a", "dgx-c", "pcie-b"]
    shown = kubesage("show", str(out))
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("2 zone(s), 3 rack(s), 4 node(s), 20 GPU(s)")
    assert "dgx: 2 node(s) × 8 H100-80GB, NVLink nvswitch" in shown.stdout


def test_discover_names_what_is_wrong(tmp_path: Path) -> None:
    bad = tmp_path / "nodes.json"
    bad.write_text('{"kind": "Node"}', "utf-8")
    done = kubesage("discover", str(bad))
    assert done.returncode == 2
    assert "expected a NodeList with 'items'" in done.stderr
    missing = kubesage("discover", str(tmp_path / "absent.json"))
    assert missing.returncode == 2 and "cannot read" in missing.stderr


def test_show_takes_a_shipped_example_by_name() -> None:
    shown = kubesage("show", "pcie-nvlink-pairs")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == kubesage("show", str(CONFIGS / "pcie-nvlink-pairs.yaml")).stdout
    unknown = kubesage("show", "no-such-topology")
    assert unknown.returncode != 0
    assert "examples: cpu-racks, dgx-h100-pod" in unknown.stderr


def discover_in_process(*args: str) -> Result:
    return CliRunner().invoke(topology_app, ["discover", *args])


def test_discover_refuses_bad_files_and_uplinks_in_one_line(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.json"
    nodes.write_text(json.dumps({"kind": "NodeList", "items": NODES}), "utf-8")
    templates = tmp_path / "templates.yaml"
    templates.write_text(
        (CONFIGS / "dgx-h100-pod.yaml").read_text().replace("dgx-h100", "dgx"), "utf-8"
    )
    utf16 = tmp_path / "utf16.json"
    utf16.write_bytes(json.dumps({"kind": "NodeList", "items": NODES}).encode("utf-16"))
    cases = [
        (
            [str(nodes), "--templates", str(templates), "--output", str(tmp_path)],
            f"--output {tmp_path}: cannot write: Is a directory",
        ),
        ([str(nodes), "--rack-uplink-gbps", "-5"], "--rack-uplink-gbps must be a positive"),
        ([str(nodes), "--zone-uplink-gbps", "inf"], "--zone-uplink-gbps must be a positive"),
        ([str(utf16)], f"{utf16}: line 1: not UTF-8 text (byte 0xff; save it as UTF-8)"),
        ([str(tmp_path)], f"{tmp_path}: cannot read: Is a directory"),
    ]
    for args, words in cases:
        result = discover_in_process(*args)
        assert result.exit_code == 2, (args, result.output)
        assert "Traceback" not in result.output
        assert result.output.startswith("error: ") and result.output.count("\n") == 1
        assert words in result.output, result.output


def test_show_names_the_line_of_a_latin1_topology(tmp_path: Path) -> None:
    path = tmp_path / "topology.yaml"
    text = (CONFIGS / "pcie-nvlink-pairs.yaml").read_text("utf-8")
    path.write_bytes(text.encode() + "# café\n".encode("latin-1"))
    result = CliRunner().invoke(topology_app, ["show", str(path)])
    assert result.exit_code == 2
    line = text.count("\n") + 1
    assert (
        result.output
        == f"error: {path}: line {line}: not UTF-8 text (byte 0xe9; save it as UTF-8)\n"
    )
