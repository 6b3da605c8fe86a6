"""Per-tick budgets: how many actions of each kind the loop may execute in one tick.

A budget bounds the disruption one tick can cause — e.g. four evictions and one node
re-layout (a ``label-node`` for mig-parted) per tick, binds unlimited. A limit of 0
switches that kind off; the loop then audits every such action as over budget with
the reason, so "nothing was evicted" always says why.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kubesage.core.loop.actions import ActionKind

DEFAULT_LIMITS: Mapping[ActionKind, int] = {ActionKind.EVICT: 4, ActionKind.LABEL_NODE: 1}
"""Evictions and node re-layouts are bounded by default; other kinds are unlimited."""


@dataclass(frozen=True)
class Budgets:
    """Limits per action kind and tick; a kind not listed is unlimited."""

    limits: Mapping[ActionKind, int] = field(default_factory=lambda: dict(DEFAULT_LIMITS))

    def __post_init__(self) -> None:
        for kind, limit in self.limits.items():
            if limit < 0:
                raise ValueError(f"the budget for {kind} must be 0 or more, got {limit}")

    def with_limit(self, kind: ActionKind, limit: int | None) -> Budgets:
        """A copy with ``kind`` limited to ``limit`` per tick (None: unlimited)."""
        limits = {k: v for k, v in self.limits.items() if k != kind}
        if limit is not None:
            limits[kind] = limit
        return Budgets(limits)

    def start_tick(self) -> TickBudget:
        """A fresh account of what this tick has spent."""
        return TickBudget(self)


class TickBudget:
    """What one tick has spent against its :class:`Budgets`."""

    def __init__(self, budgets: Budgets) -> None:
        self.budgets = budgets
        self.spent: Counter[ActionKind] = Counter()

    def refusal(self, kinds: Iterable[ActionKind]) -> str | None:
        """Why actions of ``kinds`` (together) would overspend; None when they fit."""
        wanted = Counter(kinds)
        for kind, count in sorted(wanted.items()):
            limit = self.budgets.limits.get(kind)
            if limit is None:
                continue
            if limit == 0:
                return f"the budget for {kind} is 0 per tick: {kind} actions are switched off"
            if self.spent[kind] + count > limit:
                return (
                    f"the budget for {kind} is {limit} per tick and "
                    f"{self.spent[kind]} already spent this tick"
                    + (f"; this needs {count}" if count > 1 else "")
                )
        return None

    def spend(self, kind: ActionKind) -> None:
        self.spent[kind] += 1
