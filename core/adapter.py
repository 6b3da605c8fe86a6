"""The adapter extension point.

A workload adapter (GPU training, Flink, Spark) is a package under ``adapters/``
that exposes an object satisfying :class:`Adapter` through the ``kubesage.adapters``
entry-point group: its CLI commands and what it adds to the control loop — the
reconcilers that decide, and the collectors and actuators they need beyond the core's
(the Flink adapter's REST collector and rescale actuator, say). The core only ever
reaches adapters through this protocol and :func:`load_adapters`; an adapter that is
not configured (no Flink job registered, say) adds nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Protocol, runtime_checkable

import typer

from kubesage.core.loop.reconciler import Actuator, Reconciler
from kubesage.core.loop.settings import ReconcilerContext
from kubesage.core.perception import Collector

log = logging.getLogger(__name__)

ADAPTER_GROUP = "kubesage.adapters"


@runtime_checkable
class Adapter(Protocol):
    """What the core needs from an adapter."""

    @property
    def name(self) -> str:
        """The CLI group name (``kubesage <name> …``)."""
        ...

    @property
    def cli(self) -> typer.Typer:
        """The adapter's sub-commands."""
        ...

    def reconcilers(self, context: ReconcilerContext) -> Sequence[Reconciler]:
        """The reconcilers it adds to the control loop (``()`` when none)."""
        ...

    def collectors(self, context: ReconcilerContext) -> Sequence[Collector[Any]]:
        """The collectors its reconcilers read beyond the core's (``()`` when none);
        their snapshots reach every reconciler under the collector's name."""
        ...

    def actuators(self, context: ReconcilerContext) -> Sequence[Actuator]:
        """The actuators for action kinds the core does not execute (``()`` when none)."""
        ...


def load_adapters(
    entries: Iterable[EntryPoint] | None = None,
) -> tuple[list[Adapter], list[str]]:
    """The adapters of the entry-point group (or of ``entries``), and a warning for
    each one that failed to load — a broken adapter must not take the core down."""
    if entries is None:
        entries = entry_points(group=ADAPTER_GROUP)
    adapters: list[Adapter] = []
    warnings: list[str] = []
    for entry in entries:
        try:
            adapter = entry.load()
            if not isinstance(adapter, Adapter):
                raise TypeError(
                    "it lacks one of 'name', 'cli', 'reconcilers', 'collectors', 'actuators' "
                    "(see kubesage.core.adapter.Adapter)"
                )
            adapters.append(adapter)
        except Exception as exc:  # reported, then skipped
            warnings.append(f"adapter '{entry.name}' failed to load: {exc}")
    return adapters, warnings


@dataclass
class LoopParts:
    """What the installed adapters add to the control loop, and what went wrong."""

    reconcilers: list[Reconciler] = field(default_factory=list)
    collectors: list[Collector[Any]] = field(default_factory=list)
    actuators: list[Actuator] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    """One per adapter part that raised (the adapter's other parts still count)."""


def adapter_parts(adapters: Iterable[Adapter], context: ReconcilerContext) -> LoopParts:
    """Every adapter's reconcilers, collectors and actuators; a warning for each part
    that failed to build (the adapter's other parts, and other adapters, still count)."""
    parts = LoopParts()
    for adapter in adapters:
        wanted: tuple[tuple[str, list[Any]], ...] = (
            ("reconcilers", parts.reconcilers),
            ("collectors", parts.collectors),
            ("actuators", parts.actuators),
        )
        for what, into in wanted:
            try:
                into.extend(getattr(adapter, what)(context))
            except Exception as exc:  # reported, then skipped
                parts.warnings.append(f"adapter '{adapter.name}' has no {what}: {exc}")
    return parts
