"""The ``kubesage`` command: core sub-commands plus those adapters register.

Adapters plug in through the ``kubesage.adapters`` entry-point group; each entry
point names an object with a ``name`` and a typer ``cli``. An adapter that fails to
load is reported on stderr and skipped — the core commands keep working.
"""

from __future__ import annotations

import sys
from importlib.metadata import entry_points

import typer

from kubesage.core.cli.data import data_app
from kubesage.core.cli.simulate import simulate

app = typer.Typer(
    name="kubesage",
    help="Topology- and forecast-aware scheduling for AI training and data jobs on Kubernetes.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.command(name="simulate")(simulate)
app.add_typer(data_app, name="data")

ADAPTER_GROUP = "kubesage.adapters"


def _register_adapters() -> None:
    for entry in entry_points(group=ADAPTER_GROUP):
        try:
            adapter = entry.load()
            app.add_typer(adapter.cli, name=adapter.name)
        except Exception as exc:  # a broken adapter must not take the core CLI down
            print(f"warning: adapter '{entry.name}' failed to load: {exc}", file=sys.stderr)


_register_adapters()
