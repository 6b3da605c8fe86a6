"""The ``kubesage`` command: core sub-commands plus those adapters register.

Adapters plug in through the ``kubesage.adapters`` entry-point group; each entry
point names an :class:`~kubesage.core.adapter.Adapter` (a ``name``, a typer ``cli``
and its control-loop ``reconcilers``). An adapter that fails to load is reported on
stderr and skipped — the core commands keep working.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from importlib.metadata import EntryPoint, entry_points

import typer

from kubesage.core.adapter import ADAPTER_GROUP, load_adapters
from kubesage.core.cli.data import data_app
from kubesage.core.cli.forecast import forecast_app
from kubesage.core.cli.loop import loop
from kubesage.core.cli.qualify import qualify_command
from kubesage.core.cli.serve import serve
from kubesage.core.cli.simulate import simulate
from kubesage.core.cli.telemetry import telemetry_app
from kubesage.core.cli.topology import topology_app
from kubesage.core.cli.train import train_app

app = typer.Typer(
    name="kubesage",
    help="Topology- and forecast-aware scheduling for AI training and data jobs on Kubernetes.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.command(name="simulate")(simulate)
app.command(name="qualify")(qualify_command)
app.command(name="serve")(serve)
app.command(name="loop")(loop)
app.add_typer(data_app, name="data")
app.add_typer(forecast_app, name="forecast")
app.add_typer(topology_app, name="topology")
app.add_typer(telemetry_app, name="telemetry")
app.add_typer(train_app, name="train")

__all__ = ["ADAPTER_GROUP", "app", "register_adapters"]


def register_adapters(target: typer.Typer, entries: Iterable[EntryPoint]) -> list[str]:
    """Add each adapter's commands to ``target``; return the names of those that loaded."""
    adapters, warnings = load_adapters(entries)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    for adapter in adapters:
        target.add_typer(adapter.cli, name=adapter.name)
    return [adapter.name for adapter in adapters]


register_adapters(app, entry_points(group=ADAPTER_GROUP))
