"""The openb readers on the real shared trace files: node and GPU counts, models, and
every pod-list variant (skipped where the shared data is not beside the repository)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from kubesage.core.traces import read_nodes, read_pods
from kubesage.core.traces.openb import POD_REQUIRED_COLUMNS
from tests.builders import pod_category, shared_data_dir


@pytest.fixture(scope="module")
def openb_dir() -> Path:
    root = shared_data_dir()
    if root is None or not (root / "openb").is_dir():
        pytest.skip(
            "real openb trace not found: set KUBESAGE_SHARED_DATA or place it in "
            "../shared/data/openb beside the repository"
        )
    return root / "openb"


def test_real_gpu_node_list(openb_dir: Path) -> None:
    nodes = read_nodes(openb_dir / "openb_node_list_gpu_node.csv")
    assert len(nodes) == 1213
    assert sum(n.gpu_count for n in nodes) == 6212
    gpus_by_model: Counter[str | None] = Counter()
    for n in nodes:
        gpus_by_model[n.gpu_model] += n.gpu_count
    assert gpus_by_model == {
        "G2": 4392,
        "T4": 842,
        "G3": 312,
        "P100": 265,
        "V100M32": 204,
        "V100M16": 195,
        "A10": 2,
    }


def test_real_all_node_list(openb_dir: Path) -> None:
    nodes = read_nodes(openb_dir / "openb_node_list_all_node.csv")
    assert len(nodes) == 1523
    cpu_only = [n for n in nodes if n.gpu_count == 0]
    assert len(cpu_only) == 310
    assert all(n.gpu_model is None for n in cpu_only)
    assert sum(n.gpu_count for n in nodes) == 6212


def test_real_default_pod_list(openb_dir: Path) -> None:
    pods = read_pods(openb_dir / "openb_pod_list_default.csv")
    assert len(pods) == 8152
    assert Counter(pod_category(p) for p in pods) == {
        "cpu": 1088,
        "share": 3078,
        "gpu1": 3911,
        "gpu2": 16,
        "gpu4": 15,
        "gpu8": 44,
    }
    assert all(p.creation_time_s is not None for p in pods)
    assert {p.qos for p in pods} >= {"LS", "BE"}


def test_real_multigpu20_has_five_columns(openb_dir: Path) -> None:
    path = openb_dir / "openb_pod_list_multigpu20.csv"
    with path.open(encoding="utf-8") as handle:
        assert handle.readline().strip() == ",".join(POD_REQUIRED_COLUMNS)
    pods = read_pods(path)
    assert len(pods) > 8000
    assert all(p.creation_time_s is None and p.deletion_time_s is None for p in pods)
    assert all(p.gpu_models == () and p.qos == "LS" for p in pods)
    multi = sum(1 for p in pods if p.num_gpu > 1)
    assert multi > 16 + 15 + 44  # the variant stresses multi-GPU pods


@pytest.mark.parametrize("variant", ["cpu050", "gpushare40", "gpuspec20"])
def test_real_pod_variants_read(openb_dir: Path, variant: str) -> None:
    pods = read_pods(openb_dir / f"openb_pod_list_{variant}.csv")
    assert len(pods) > 7000
    assert len({p.name for p in pods}) == len(pods)
    node_models = {n.gpu_model for n in read_nodes(openb_dir / "openb_node_list_gpu_node.csv")}
    for p in pods:
        assert set(p.gpu_models) <= node_models
    constrained = sum(1 for p in pods if p.gpu_models)
    if variant == "gpuspec20":
        assert constrained > 0
