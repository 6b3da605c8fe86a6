"""Choose one learned model among several trained ones, by replay on arrival orders of
their own.

The same training recipe run with another seed can give a very different policy: one
seed of the shipped recipe lost 1.6 points of GPU allocation to FGD where another gained
(docs/ppo.md, "Training seeds"). Training several seeds and keeping the best is only
sound if "best" is measured on something the models will not later be judged on. Here
each candidate model replays every workload it was trained for in the arrival orders
qualification uses (:func:`~kubesage.core.sim.qualification.qualification_seeds`,
never the benchmark's), against the baseline on the same orders, and the model with the
highest mean gain over the workloads is chosen (the first listed on a tie). The baseline
runs once per workload and order, shared by every candidate.

Each candidate's gains per workload are kept as a
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
    judge,
    paired_gains,
    qualification_seeds,
)
from kubesage.core.sim.runner import RunResult, RunSpec, run_many
from kubesage.core.types import NodeSpec, PodRequest

LEARNED_POLICY = "ppo"
"""The policy every candidate model is run as."""


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


def select_model(
    nodes: Sequence[NodeSpec],
    workloads: Sequence[Workload],
    models: Sequence[tuple[str, Path]],
    *,
    baseline: str = "fgd",
    runs: int = DEFAULT_RUNS,
    z: float = DEFAULT_Z,
    jobs: int = 1,
    on_result: Callable[[RunResult], None] | None = None,
) -> Selection:
    """Replay ``runs`` arrival orders of each workload through the baseline and through
    each ``(label, model file)`` run as the learned policy; score and choose.

    ``on_result`` sees every run as it ends: ``len(workloads) * runs * (len(models) + 1)``
    in all.
    """
    if not models:
        raise InputError("model selection needs at least one candidate model")
    if not workloads:
        raise InputError("model selection needs at least one workload to replay")
    labels = [label for label, _ in models]
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise InputError(f"model selection: candidate labels repeat: {', '.join(repeated)}")
    if baseline == LEARNED_POLICY:
        raise InputError(f"model selection: the baseline cannot be {LEARNED_POLICY} itself")
    seeds = qualification_seeds(runs)
    verdicts: list[list[Qualification]] = [[] for _ in models]
    for workload in workloads:
        specs = [RunSpec(baseline, seed) for seed in seeds] + [
            RunSpec(LEARNED_POLICY, seed, model=path) for _, path in models for seed in seeds
        ]
        results = run_many(specs, nodes, workload.pods, jobs=jobs, on_result=on_result)
        ours = results[runs:]
        for number, (label, _) in enumerate(models):
            theirs = ours[number * runs : (number + 1) * runs]
            try:
                paired, gains = paired_gains([*results[:runs], *theirs], LEARNED_POLICY, baseline)
            except InputError as exc:
                raise InputError(f"workload {workload.name}, model {label}: {exc}") from exc
            verdicts[number].append(judge(label, baseline, paired, gains, z))
    scores = tuple(
        CandidateScore(label, path, tuple(verdicts[number]))
        for number, (label, path) in enumerate(models)
    )
    return Selection(baseline, tuple(w.name for w in workloads), scores)
