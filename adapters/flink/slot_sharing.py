"""How many task slots each slot-sharing group of a job gets when the plan needs more
slots than the cluster has for it.

A slot-sharing group takes as many slots as its largest vertex's parallelism. When a
scaling plan asks for more in all than the job's slots (those it holds plus the free
ones), :func:`share_slots` splits them by water-filling: a group that does not grow
gets what it asks (a scale-down frees slots for the others); every growing group keeps
the slots it holds, and the spare slots go one at a time to the growing group with
the fewest that still wants more. No group gets more than it asks, so the slots one
group does not need go to those that do, and no slot is left unused while a group
still wants it. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class GroupNeed:
    """One slot-sharing group's slots now and in the plan."""

    held: int
    """Slots the group holds now: its largest current parallelism."""
    wanted: int
    """Slots the plan asks for: its largest proposed parallelism."""


def share_slots(groups: Mapping[str, GroupNeed], capacity: int) -> dict[str, int]:
    """Group → slots it may use, within ``capacity`` (see the module docstring).

    A growing group never gets fewer than it holds, even when ``capacity`` is below
    what the groups hold together (a stale slot count): nothing is scaled down for lack
    of slots.
    """
    allowed = {name: min(need.held, need.wanted) for name, need in groups.items()}
    spare = capacity - sum(allowed.values())
    while spare > 0:
        wanting = [name for name, need in groups.items() if allowed[name] < need.wanted]
        if not wanting:
            break
        fewest = min(wanting, key=lambda name: allowed[name])
        allowed[fewest] += 1
        spare -= 1
    return allowed
