"""Choose one learned model among several trained ones, by replay on arrival orders of
their own.

The same training recipe run with another seed can give a very different policy: one
seed of the shipped recipe lost 1.6 points of GPU allocation to FGD where another gained
(docs/ppo.md, "Choosing among training seeds"). Training several seeds and keeping the
best is only sound if "best" is measured on something the models are not later judged
on. Here each candidate model replays every workload it was trained for in arrival
orders of selection's own (:data:`SELECT_SEEDS_FROM` on: neither the benchmarks' nor
those ``kubesage qualify`` replays), against the baseline on the same orders, and the
model with the highest mean gain over the workloads is chosen (the first listed on a
tie).

The baseline's runs come first (:func:`run_baseline`): they are shared by every
candidate, and a workload whose arrivals cannot be compared at 130 % is refused by
them, before any model is trained. Each candidate's gains per workload are kept as a
:class:`~kubesage.core.sim.qualification.Qualification`, so whether the chosen model is
ahead of the baseline beyond the spread of arrival orders is reported too: choosing
the best of several does not make it good.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kubesage.core.errors import InputError
from kubesage.core.sim.qualification import (
    DEFAULT_RUNS,
    DEFAULT_Z,
    Qualification,
    allocation_compared,
    judge,
    paired_gains,
)
from kubesage.core.sim.runner import RunResult, RunSpec, run_many
from kubesage.core.types import NodeSpec, PodRequest

LEARNED_POLICY = "ppo"
"""The policy every candidate model is run as."""
SELECT_SEEDS_FROM = 20_000
"""The first arrival-order seed selection replays (qualification's start at 10,000)."""


@dataclass(frozen=True)
class Workload:
    """One workload the candidates are replayed on, named for the report."""

    name: str
    pods: Sequence[PodRequest]


@dataclass(frozen=True)
class CandidateScore:
    """One candidate model against the baseline, on each workload."""

    label: str
    model: Path
    per_workload: tuple[Qualification, ...]
    """In the order of :attr:`Selection.workloads`."""

    @property
    def mean_gain(self) -> float:
        """Candidate − baseline allocation at 130 % arrived, mean over the workloads."""
        return statistics.fmean(q.mean_gain for q in self.per_workload)

    @property
    def worst_gain(self) -> float:
        """The lowest of its per-workload mean gains."""
        return min(q.mean_gain for q in self.per_workload)

    @property
    def qualified_everywhere(self) -> bool:
        """Ahead of the baseline beyond the spread of arrival orders on every workload."""
        return all(q.qualified for q in self.per_workload)


@dataclass(frozen=True)
class Selection:
    """Every candidate's scores, and the one chosen."""

    baseline: str
    workloads: tuple[str, ...]
    scores: tuple[CandidateScore, ...]

    @property
    def chosen(self) -> CandidateScore:
        """The candidate with the highest mean gain (the first listed on a tie)."""
        return max(self.scores, key=lambda score: score.mean_gain)

    def as_dict(self) -> dict[str, object]:
        """A JSON-ready record (gains rounded to 0.001 point)."""
        return {
            "baseline": self.baseline,
            "workloads": list(self.workloads),
            "chosen": self.chosen.label,
            "candidates": {
                score.label: {
                    "mean_gain": round(score.mean_gain, 3),
                    "worst_gain": round(score.worst_gain, 3),
                    "qualified_everywhere": score.qualified_everywhere,
                    "per_workload": {
                        name: q.as_dict()
                        for name, q in zip(self.workloads, score.per_workload, strict=True)
                    },
                }
                for score in self.scores
            },
        }


def selection_seeds(runs: int) -> tuple[int, ...]:
    """The arrival-order seeds a selection of ``runs`` orders per workload replays."""
    if runs < 2:
        raise InputError(f"model selection needs at least 2 arrival orders, got {runs}")
    return tuple(range(SELECT_SEEDS_FROM, SELECT_SEEDS_FROM + runs))


@dataclass(frozen=True)
class Baseline:
    """The baseline's runs on each workload, in selection's arrival orders."""

    policy: str
    workloads: tuple[Workload, ...]
    results: tuple[tuple[RunResult, ...], ...]
    """Per workload, one run per arrival order."""


def run_baseline(
    nodes: Sequence[NodeSpec],
    workloads: Sequence[Workload],
    *,
    policy: str = "fgd",
    runs: int = DEFAULT_RUNS,
    jobs: int = 1,
    on_result: Callable[[RunResult], None] | None = None,
) -> Baseline:
    """Replay ``runs`` arrival orders of each workload through the baseline ``policy``;
    InputError naming the workload when an order cannot be compared at 130 % arrived."""
    if not workloads:
        raise InputError("model selection needs at least one workload to replay")
    repeated = _repeated([w.name for w in workloads])
    if repeated:
        raise InputError(f"model selection: workload names repeat: {repeated}")
    if policy == LEARNED_POLICY:
        raise InputError(f"model selection: the baseline cannot be {LEARNED_POLICY} itself")
    seeds = selection_seeds(runs)
    results: list[tuple[RunResult, ...]] = []
    for workload in workloads:
        specs = [RunSpec(policy, seed) for seed in seeds]
        done = run_many(specs, nodes, workload.pods, jobs=jobs, on_result=on_result)
        try:
            for result in done:
                allocation_compared(result)
        except InputError as exc:
            raise InputError(f"model selection, workload {workload.name}: {exc}") from exc
        results.append(tuple(done))
    return Baseline(policy, tuple(workloads), tuple(results))


def select_model(
    nodes: Sequence[NodeSpec],
    baseline: Baseline,
    models: Sequence[tuple[str, Path]],
    *,
    z: float = DEFAULT_Z,
    jobs: int = 1,
    on_result: Callable[[RunResult], None] | None = None,
) -> Selection:
    """Replay each ``(label, model file)`` as the learned policy on the baseline's
    workloads and arrival orders; score each against the baseline and choose.

    ``on_result`` sees every run as it ends: one per workload, order and model.
    """
    if not models:
        raise InputError("model selection needs at least one candidate model")
    repeated = _repeated([label for label, _ in models])
    if repeated:
        raise InputError(f"model selection: candidate labels repeat: {repeated}")
    verdicts: list[list[Qualification]] = [[] for _ in models]
    for workload, theirs in zip(baseline.workloads, baseline.results, strict=True):
        seeds = [r.seed for r in theirs]
        specs = [RunSpec(LEARNED_POLICY, seed, model=path) for _, path in models for seed in seeds]
        ours = run_many(specs, nodes, workload.pods, jobs=jobs, on_result=on_result)
        for number, (label, _) in enumerate(models):
            runs = ours[number * len(seeds) : (number + 1) * len(seeds)]
            try:
                paired, gains = paired_gains([*theirs, *runs], LEARNED_POLICY, baseline.policy)
            except InputError as exc:
                raise InputError(f"workload {workload.name}, model {label}: {exc}") from exc
            verdicts[number].append(judge(label, baseline.policy, paired, gains, z))
    scores = tuple(
        CandidateScore(label, path, tuple(verdicts[number]))
        for number, (label, path) in enumerate(models)
    )
    return Selection(baseline.policy, tuple(w.name for w in baseline.workloads), scores)


def _repeated(names: Sequence[str]) -> str:
    """The names given more than once, listed ("" when none is)."""
    return ", ".join(sorted({name for name in names if names.count(name) > 1}))
