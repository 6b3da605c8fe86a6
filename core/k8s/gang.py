"""Gangs: the annotation protocol and all-or-nothing placement.

A gang is the pods of one namespace that carry the same gang name; it is placed only
when at least ``min-available`` of them can all be placed at once. The annotations
(on every member):

=====================================  ===================================================
``kubesage.io/gang``                   gang name (also read: Koordinator's
                                       ``gang.scheduling.koordinator.sh/name``, and the
                                       scheduler-plugins ``pod-group.scheduling.sigs.k8s.io/name``
                                       or ``pod-group.scheduling.sigs.k8s.io`` label/annotation)
``kubesage.io/gang-min-available``     members that must be placed together (default: 1;
                                       also ``gang.scheduling.koordinator.sh/min-available``,
                                       ``pod-group.scheduling.sigs.k8s.io/min-available``)
``kubesage.io/gang-waiting-time``      how long a gang may wait for members or room before
                                       a ``FailedScheduling`` event and a fresh wait (a Go
                                       duration ``"90s"``, ``"2m"`` or seconds; default
                                       120 s, Koordinator's default; also
                                       ``gang.scheduling.koordinator.sh/waiting-time``)
=====================================  ===================================================

:func:`place_all` places the members one after another on a *copy* of the state with
the core policy, each seeing the ones before it, and returns every placement or none;
nothing is bound before the whole gang has a place.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from kubesage.core.annotations import (
    GANG_ANNOTATION,
    GANG_MIN_AVAILABLE_ANNOTATION,
    GANG_WAITING_TIME_ANNOTATION,
)
from kubesage.core.arrays import BoolArray
from kubesage.core.durations import DurationError, parse_duration_s
from kubesage.core.errors import CapacityError, InputError
from kubesage.core.policy.base import Policy
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.types import Placement, PodRequest

GANG_NAME_KEYS = (
    GANG_ANNOTATION,
    "gang.scheduling.koordinator.sh/name",
    "pod-group.scheduling.sigs.k8s.io/name",
    "pod-group.scheduling.sigs.k8s.io",
)
"""Annotations (then labels) naming a pod's gang, first found wins."""
MIN_AVAILABLE_KEYS = (
    GANG_MIN_AVAILABLE_ANNOTATION,
    "gang.scheduling.koordinator.sh/min-available",
    "pod-group.scheduling.sigs.k8s.io/min-available",
)
WAITING_TIME_KEYS = (
    GANG_WAITING_TIME_ANNOTATION,
    "gang.scheduling.koordinator.sh/waiting-time",
)
DEFAULT_WAITING_TIME_S = 120.0
"""Koordinator's default gang waiting time."""
MAX_MIN_AVAILABLE = 10_000
MAX_WAIT_S = 7 * 24 * 3600.0
"""The longest gang wait an annotation may ask for (a week)."""


class GangAnnotationError(InputError):
    """A gang annotation with a value that cannot be read; names the pod and the key."""


@dataclass(frozen=True)
class GangSpec:
    """What a pod's annotations say about its gang."""

    key: str
    """``namespace/name``; a pod without a gang is a gang of one keyed by its own name."""
    min_available: int
    """Members that must be placed together."""
    waiting_time_s: float
    """How long to wait (for members or for room) before reporting and waiting afresh."""
    named: bool
    """False for a pod that is a gang of one only because it names no gang."""


def _first(maps: Sequence[Mapping[str, str]], keys: Sequence[str]) -> tuple[str, str] | None:
    for mapping in maps:
        for key in keys:
            value = mapping.get(key)
            if value:
                return key, value
    return None


def names_a_gang(annotations: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """Whether a pod with these annotations and labels names a gang (a cheap test before
    :func:`gang_of`, for code that looks at every pod)."""
    return _first((annotations, labels), GANG_NAME_KEYS) is not None


def gang_of(pod: Mapping[str, Any]) -> GangSpec:
    """The pod's gang (a gang of one when it names none); GangAnnotationError if malformed."""
    metadata = pod.get("metadata") or {}
    namespace = metadata.get("namespace") or "default"
    name = metadata.get("name") or ""
    annotations: Mapping[str, str] = metadata.get("annotations") or {}
    labels: Mapping[str, str] = metadata.get("labels") or {}
    where = f"pod {namespace}/{name}"
    found = _first((annotations, labels), GANG_NAME_KEYS)
    if found is None:
        return GangSpec(f"{namespace}/{name}", 1, DEFAULT_WAITING_TIME_S, named=False)
    minimum = 1
    found_min = _first((annotations, labels), MIN_AVAILABLE_KEYS)
    if found_min is not None:
        key, text = found_min
        if not text.strip().isdecimal() or not 1 <= int(text) <= MAX_MIN_AVAILABLE:
            raise GangAnnotationError(
                f"{where}: annotation {key}={text[:40]!r} is not a whole number in "
                f"1..{MAX_MIN_AVAILABLE}"
            )
        minimum = int(text)
    waiting = DEFAULT_WAITING_TIME_S
    found_wait = _first((annotations,), WAITING_TIME_KEYS)
    if found_wait is not None:
        try:
            waiting = parse_duration_s(
                found_wait[1], f"{where}: annotation {found_wait[0]}", maximum_s=MAX_WAIT_S
            )
        except DurationError as exc:
            raise GangAnnotationError(str(exc)) from None
    return GangSpec(f"{namespace}/{found[1]}", minimum, waiting, named=True)


# -- placement --------------------------------------------------------------------------

# Stamps for nodes while they are hidden for one member's decision, and again once
# shown: negative and below -1 (caches start at -1), unique, so no policy cache keyed on
# node_version takes a hidden node for the node as it was, or the other way round.
_hidden_stamps = itertools.count(-2, -1)


@contextmanager
def _only(state: ClusterState, eligible: BoolArray | None) -> Iterator[None]:
    """Hide the nodes outside ``eligible`` (no CPU fits there) for one decision."""
    if eligible is None or bool(eligible.all()):
        yield
        return
    hidden = np.flatnonzero(~eligible)
    saved = state.cpu_free_milli[hidden].copy()
    state.cpu_free_milli[hidden] = -1
    state.node_version[hidden] = [next(_hidden_stamps) for _ in range(hidden.size)]
    try:
        yield
    finally:
        state.cpu_free_milli[hidden] = saved
        state.node_version[hidden] = [next(_hidden_stamps) for _ in range(hidden.size)]


@dataclass(frozen=True)
class GangOutcome:
    """The result of trying to place a gang."""

    placements: tuple[Placement, ...] | None
    """One placement per member in order, or None when the gang does not fit."""
    reason: str
    """Why not (the first member that found no node), or the policy's summary."""


def place_all(
    state: ClusterState,
    members: Sequence[tuple[PodRequest, BoolArray | None]],
    policy: Policy,
) -> GangOutcome:
    """Place every ``(request, eligible nodes)`` on ``state`` (mutated: pass a copy)."""
    placements: list[Placement] = []
    for request, eligible in members:
        with _only(state, eligible):
            decision = policy.decide(state, request)
        if decision.placement is None:
            return GangOutcome(
                None,
                f"{request.name} ({len(placements)} of {len(members)} placed): "
                f"{decision.explanation}",
            )
        try:
            state.allocate(request, decision.placement)
        except CapacityError as exc:  # a policy bug; report it rather than bind
            return GangOutcome(None, f"{request.name}: policy chose an impossible place: {exc}")
        placements.append(decision.placement)
    return GangOutcome(tuple(placements), f"{len(placements)} member(s) placed by {policy.name}")
