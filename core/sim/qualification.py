"""Qualify a candidate policy for a workload by trace replay before it places anything.

A learned policy that gains on average can still lose on a workload of a shape it was
not trained on. Which one it is can be measured before the policy is trusted: replay
the cluster's own workload, in arrival orders drawn the way the FGD protocol draws
them (:func:`~kubesage.core.sim.protocol.fgd_arrivals`), through the candidate and
through the baseline, and compare the allocation each reaches at 130 % arrived, order
by order. The candidate qualifies only when its mean gain is ahead by more than
``z`` standard errors of the paired gains: where the two are level within the spread
of arrival orders the baseline keeps its place, so a policy chosen this way costs
nothing where it has nothing to add.

It reads the nodes and the workload the policies are given anyway (FGD's typical pods
are drawn from the same workload); the arrival orders it replays are its own
(:data:`QUALIFY_SEEDS_FROM` on), never the ones a run is later judged on.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kubesage.core.errors import InputError
from kubesage.core.sim.runner import RunResult, RunSpec, run_many
from kubesage.core.types import NodeSpec, PodRequest

QUALIFY_SEEDS_FROM = 10_000
"""The first arrival-order seed qualification replays; runs use the ones after it."""
DEFAULT_RUNS = 8
"""Arrival orders replayed per policy."""
DEFAULT_Z = 2.0
"""Standard errors the mean gain must clear: about 95 % one-sided for 8 paired runs
(Student's t with 7 degrees of freedom: 1.89)."""


@dataclass(frozen=True)
class Qualification:
    """The candidate against the baseline on one cluster and workload."""

    candidate: str
    baseline: str
    seeds: tuple[int, ...]
    gains: tuple[float, ...]
    """Candidate − baseline allocation at 130 % arrived (points), per arrival order."""
    mean_gain: float
    standard_error: float
    z: float

    @property
    def lower_bound(self) -> float:
        """The mean gain less ``z`` standard errors."""
        return self.mean_gain - self.z * self.standard_error

    @property
    def qualified(self) -> bool:
        """Whether the candidate is ahead beyond the spread of arrival orders."""
        return self.lower_bound > 0.0

    @property
    def chosen(self) -> str:
        """The policy to run: the candidate when it qualified, else the baseline."""
        return self.candidate if self.qualified else self.baseline

    def as_dict(self) -> dict[str, object]:
        """A JSON-ready record (gains rounded to 0.001 point)."""
        return {
            "candidate": self.candidate,
            "baseline": self.baseline,
            "seeds": list(self.seeds),
            "gains": [round(g, 3) for g in self.gains],
            "mean_gain": round(self.mean_gain, 3),
            "standard_error": round(self.standard_error, 3),
            "lower_bound": round(self.lower_bound, 3),
            "z": self.z,
            "qualified": self.qualified,
            "chosen": self.chosen,
        }


def qualification_seeds(runs: int) -> tuple[int, ...]:
    """The arrival-order seeds a qualification of ``runs`` orders replays."""
    if runs < 2:
        raise InputError(f"qualification needs at least 2 arrival orders, got {runs}")
    return tuple(range(QUALIFY_SEEDS_FROM, QUALIFY_SEEDS_FROM + runs))


def paired_gains(
    results: Sequence[RunResult], candidate: str, baseline: str
) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """Candidate − baseline allocation at 130 % arrived per seed both ran."""
    by_key = {(r.policy, r.seed): r for r in results}
    seeds = sorted({r.seed for r in results})
    gains: list[float] = []
    for seed in seeds:
        ours, theirs = by_key.get((candidate, seed)), by_key.get((baseline, seed))
        if ours is None or theirs is None:
            missing = candidate if ours is None else baseline
            raise InputError(f"qualification: {missing} has no run for seed {seed}")
        gains.append(allocation_compared(ours) - allocation_compared(theirs))
    return tuple(seeds), tuple(gains)


def allocation_compared(result: RunResult) -> float:
    """The allocation at 130 % arrived that policies are compared by; InputError when
    the run's arrivals end short of it."""
    if result.alloc_at_130 is None:
        raise InputError(
            f"the arrivals of seed {result.seed} end at {result.arrived_end:.1f} % of GPU "
            f"capacity for {result.policy}, short of the 130 % (±1 point) the policies are "
            "compared at; the workload is tuned a whole pod at a time, and on a small "
            "cluster one pod is several points"
        )
    return result.alloc_at_130


def judge(
    candidate: str, baseline: str, seeds: Sequence[int], gains: Sequence[float], z: float
) -> Qualification:
    """The qualification for paired ``gains`` (one per seed)."""
    if len(gains) < 2 or len(gains) != len(seeds):
        raise InputError(f"qualification needs a gain for each of 2+ seeds, got {len(gains)}")
    if not math.isfinite(z) or z < 0:
        raise InputError(f"z must be a finite number >= 0, got {z}")
    mean = statistics.fmean(gains)
    error = statistics.stdev(gains) / math.sqrt(len(gains))
    return Qualification(candidate, baseline, tuple(seeds), tuple(gains), mean, error, z)


def qualify(
    nodes: Sequence[NodeSpec],
    workload: Sequence[PodRequest],
    *,
    candidate: str = "ppo",
    baseline: str = "fgd",
    runs: int = DEFAULT_RUNS,
    z: float = DEFAULT_Z,
    model: Path | None = None,
    jobs: int = 1,
    on_result: Callable[[RunResult], None] | None = None,
) -> Qualification:
    """Replay ``runs`` arrival orders of ``workload`` on ``nodes`` through both policies
    (``model``: the candidate's model file, if it is learned) and judge the gains."""
    seeds = qualification_seeds(runs)
    specs = [
        RunSpec(policy, seed, model=model if policy == candidate else None)
        for policy in (candidate, baseline)
        for seed in seeds
    ]
    results = run_many(specs, nodes, workload, jobs=jobs, on_result=on_result)
    paired_seeds, gains = paired_gains(results, candidate, baseline)
    return judge(candidate, baseline, paired_seeds, gains, z)
