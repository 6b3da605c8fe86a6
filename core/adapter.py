"""The adapter extension point.

A workload adapter (GPU training, Flink, Spark) is a package under ``adapters/``
that exposes an object satisfying :class:`Adapter` through the ``kubesage.adapters``
entry-point group. The core only ever reaches adapters through this protocol.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import typer


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
