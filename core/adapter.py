"""The adapter extension point.

A workload adapter (GPU training, Flink, Spark) is a package under ``adapters/``
that exposes an object satisfying :class:`Adapter` through the ``kubesage.adapters``
entry-point group: its CLI commands and the reconcilers it adds to the control loop.
The core only ever reaches adapters through this protocol and :func:`load_adapters`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from importlib.metadata import EntryPoint, entry_points
from typing import Protocol, runtime_checkable

import typer

from kubesage.core.loop.reconciler import Reconciler
from kubesage.core.loop.settings import ReconcilerContext

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
                    "it has no 'name', 'cli' and 'reconcilers' (see kubesage.core.adapter.Adapter)"
                )
            adapters.append(adapter)
        except Exception as exc:  # reported, then skipped
            warnings.append(f"adapter '{entry.name}' failed to load: {exc}")
    return adapters, warnings


def adapter_reconcilers(
    adapters: Iterable[Adapter], context: ReconcilerContext
) -> tuple[list[Reconciler], list[str]]:
    """Every adapter's reconcilers, and a warning for each adapter whose failed."""
    reconcilers: list[Reconciler] = []
    warnings: list[str] = []
    for adapter in adapters:
        try:
            reconcilers.extend(adapter.reconcilers(context))
        except Exception as exc:  # one adapter's failure leaves the others' reconcilers
            warnings.append(f"adapter '{adapter.name}' has no reconcilers: {exc}")
    return reconcilers, warnings
