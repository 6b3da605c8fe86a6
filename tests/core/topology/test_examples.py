"""The shipped example topologies, by name, and the path-or-name lookup."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubesage.core.errors import InputError
from kubesage.core.topology.examples import example_paths, example_topology, topology_file
from kubesage.core.topology.graph import DRTG

CONFIGS = Path(__file__).resolve().parents[3] / "configs" / "topologies"


def test_every_file_of_configs_topologies_is_an_example_that_loads() -> None:
    examples = example_paths()
    assert sorted(examples) == sorted(p.stem for p in CONFIGS.glob("*.yaml"))
    for path in examples.values():
        DRTG.from_yaml(path)


@pytest.mark.parametrize("name", ["dgx-h100-pod", "dgx-h100-pod.yaml"])
def test_an_example_is_found_by_stem_or_file_name(name: str) -> None:
    assert example_topology(name).read_bytes() == (CONFIGS / "dgx-h100-pod.yaml").read_bytes()


def test_an_unknown_name_lists_the_examples() -> None:
    with pytest.raises(InputError, match=r"no shipped example .*examples: .*dgx-h100-pod"):
        example_topology("dgx-b200")


def test_a_file_wins_over_an_example_of_the_same_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cpu-racks").write_text("mine")
    assert topology_file("cpu-racks") == Path("cpu-racks")
    assert topology_file("dgx-h100-pod") == example_paths()["dgx-h100-pod"]


def test_a_missing_path_in_a_folder_stays_a_path_so_its_error_names_it() -> None:
    assert topology_file(Path("elsewhere/dgx-h100-pod")) == Path("elsewhere/dgx-h100-pod")
