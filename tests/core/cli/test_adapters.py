"""Adapters plug into the CLI through entry points; a broken one is reported and skipped."""

from __future__ import annotations

import sys
import types
from importlib.metadata import EntryPoint

import pytest
import typer
from typer.testing import CliRunner

from kubesage.core.adapter import Adapter
from kubesage.core.cli.main import register_adapters


@pytest.fixture
def adapter_module(monkeypatch: pytest.MonkeyPatch) -> str:
    module = types.ModuleType("fake_kubesage_adapter")
    cli = typer.Typer()

    @cli.command()
    def hello() -> None:
        typer.echo("hello from the fake adapter")

    @cli.command()
    def other() -> None:
        typer.echo("other")

    module.ADAPTER = types.SimpleNamespace(  # type: ignore[attr-defined]
        name="fake",
        cli=cli,
        reconcilers=lambda context: (),
        collectors=lambda context: (),
        actuators=lambda context: (),
    )
    module.NOT_AN_ADAPTER = object()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return module.__name__


def test_good_adapter_adds_commands_and_broken_ones_are_skipped(
    adapter_module: str, capsys: pytest.CaptureFixture[str]
) -> None:
    group = "kubesage.adapters"
    entries = [
        EntryPoint("fake", f"{adapter_module}:ADAPTER", group),
        EntryPoint("missing", "no_such_module_anywhere:ADAPTER", group),
        EntryPoint("shapeless", f"{adapter_module}:NOT_AN_ADAPTER", group),
    ]
    app = typer.Typer()

    @app.command()
    def core_command() -> None:
        typer.echo("core still works")

    assert register_adapters(app, entries) == ["fake"]
    warnings = capsys.readouterr().err
    assert "adapter 'missing' failed to load" in warnings
    assert "adapter 'shapeless' failed to load" in warnings
    runner = CliRunner()
    assert "hello from the fake adapter" in runner.invoke(app, ["fake", "hello"]).output
    assert "core still works" in runner.invoke(app, ["core-command"]).output
    assert isinstance(sys.modules[adapter_module].ADAPTER, Adapter)


def test_loop_parts_gather_every_adapter_part_and_report_a_failing_one() -> None:
    from kubesage.core.adapter import adapter_parts
    from kubesage.core.loop.settings import ReconcilerContext

    marker_reconciler, marker_actuator = object(), object()

    def broken(context: object) -> tuple[object, ...]:
        raise RuntimeError("no registry")

    good = types.SimpleNamespace(
        name="good",
        cli=typer.Typer(),
        reconcilers=lambda context: (marker_reconciler,),
        collectors=lambda context: (),
        actuators=lambda context: (marker_actuator,),
    )
    bad = types.SimpleNamespace(
        name="bad",
        cli=typer.Typer(),
        reconcilers=lambda context: (),
        collectors=broken,
        actuators=lambda context: (),
    )
    parts = adapter_parts([good, bad], ReconcilerContext())  # type: ignore[list-item]
    assert parts.reconcilers == [marker_reconciler]
    assert parts.actuators == [marker_actuator]
    assert parts.collectors == []
    assert parts.warnings == ["adapter 'bad' has no collectors: no registry"]
