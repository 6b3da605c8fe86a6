"""Settings of a simulation run: the ``Simulation`` config kind and its named defaults.

``configs/simulate.yaml`` spells out these defaults; command-line options override
whatever the file (or the defaults) say.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator

from kubesage.core.config import StrictModel
from kubesage.core.errors import InputError
from kubesage.core.policy.registry import DEFAULT_POLICIES, policy_names
from kubesage.core.sim.protocol import DEFAULT_TUNE

SIMULATION_KIND = "Simulation"

DEFAULT_SYNTHETIC_NODES = 1213
"""Nodes of the embedded synthetic cluster: openb's GPU node count."""
DEFAULT_SYNTHETIC_PODS = 8152
"""Pods of the embedded synthetic workload: openb ``default``'s pod count."""
DEFAULT_SEEDS = tuple(range(42, 52))
"""The FGD paper's ten seeds."""
DEFAULT_REPORT_DIR = Path("kubesage-report")


Seed = Annotated[int, Field(ge=0)]
"""Seeds are non-negative (numpy's generators refuse negative ones)."""


class SyntheticCluster(StrictModel):
    nodes: int = Field(DEFAULT_SYNTHETIC_NODES, gt=0)
    """Number of GPU nodes to draw."""
    seed: Seed = 0
    """Seed of the cluster draw."""


class SyntheticWorkload(StrictModel):
    pods: int = Field(DEFAULT_SYNTHETIC_PODS, gt=0)
    """Number of pods to draw."""
    seed: Seed = 0
    """Seed of the workload draw."""
    gpu_constraint_fraction: float = Field(0.0, ge=0.0, le=1.0)
    """Share of GPU pods restricted to one GPU model."""


class ClusterSource(StrictModel):
    nodes_csv: Path | None = None
    """An openb node list; when unset the synthetic cluster is used."""
    synthetic: SyntheticCluster = SyntheticCluster()


class WorkloadSource(StrictModel):
    pods_csv: Path | None = None
    """An openb pod list; when unset the synthetic workload is used."""
    synthetic: SyntheticWorkload = SyntheticWorkload()


MAX_TUNE = 100.0
"""Largest ``tune``: a hundred times the cluster's GPU capacity in requests."""


class SimulationSettings(StrictModel):
    cluster: ClusterSource = ClusterSource()
    workload: WorkloadSource = WorkloadSource()
    policies: tuple[str, ...] = DEFAULT_POLICIES
    """Policies to compare, in report order."""
    seeds: tuple[Seed, ...] = DEFAULT_SEEDS
    """One run per policy and seed."""
    tune: float = Field(DEFAULT_TUNE, ge=0.0, le=MAX_TUNE, allow_inf_nan=False)
    """FGD protocol: inflate the workload to this multiple of GPU capacity (finite, at
    most ``MAX_TUNE``: the clones are held in memory)."""
    mode: Literal["fgd", "replay"] = "fgd"
    """``fgd``: arrivals only, the paper's protocol; ``replay``: creation and deletion times."""
    jobs: int | None = Field(None, ge=1)
    """Parallel worker processes; unset means one per CPU."""
    report_dir: Path = DEFAULT_REPORT_DIR
    """Where the HTML report goes."""
    model: Path | None = None
    """The ppo policy's model file; unset means the shipped configs/models one."""

    @field_validator("policies")
    @classmethod
    def _known_policies(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        known = policy_names()
        for name in value:
            if name not in known:
                raise ValueError(f"unknown policy '{name}'; known: {', '.join(known)}")
        if not value:
            raise ValueError("at least one policy is needed")
        return value

    @field_validator("seeds")
    @classmethod
    def _some_seeds(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if not value:
            raise ValueError("at least one seed is needed")
        return value


MAX_SEEDS = 10_000
"""Most seeds a range may name: a typo like ``42-510000000`` would hold every run's
settings in memory before the first ran."""


def parse_seeds(text: str) -> tuple[int, ...]:
    """``"42-51"``, ``"1,5,9"`` or a mix such as ``"1-3,10"`` → seeds in order, no repeats."""
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if "-" in part[1:]:
                cut = part.index("-", 1)
                start, end = int(part[:cut]), int(part[cut + 1 :])
                if end < start:
                    raise InputError(f"seed range '{part}' runs backwards")
                if end - start >= MAX_SEEDS:
                    raise InputError(
                        f"seed range '{part}' holds {end - start + 1} seeds; at most "
                        f"{MAX_SEEDS} (one run per seed and policy)"
                    )
                seeds.extend(range(start, end + 1))
            else:
                seeds.append(int(part))
        except ValueError:
            raise InputError(f"cannot read seeds from '{text}': '{part}' is not N or N-M") from None
    if not seeds:
        raise InputError(f"no seeds in '{text}'")
    if any(seed < 0 for seed in seeds):
        raise InputError(f"seeds must be non-negative, got '{text}'")
    return tuple(dict.fromkeys(seeds))
