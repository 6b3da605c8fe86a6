"""The import-linter contracts in pyproject.toml: they hold on the installed package, and
each one fails when a module crosses its layer.

The crossing is made in a copy of ``core/`` and ``adapters/`` laid out as the
``kubesage`` namespace package in a temporary folder, never in the source tree: the
linter runs there with ``python -S`` (no site hooks, so the editable install's finder
cannot send ``kubesage.core`` back to the checkout) and the virtualenv's
site-packages on ``PYTHONPATH`` for import-linter itself.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = REPO / "pyproject.toml"
LINT = "import sys; from importlinter.cli import lint_imports_command as c; sys.exit(c())"
"""The ``lint-imports`` console script, runnable with any interpreter flags."""


def lint_imports(*, cwd: Path, env: dict[str, str] | None = None, isolated: bool = False) -> str:
    """Run lint-imports on the contracts of the repository's pyproject.toml; its output.

    Raises AssertionError carrying the output when the run exits non-zero.
    """
    command = [sys.executable, *(["-S"] if isolated else []), "-c", LINT, str(PYPROJECT)]
    result = subprocess.run(
        [*command, "--no-cache"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    output = result.stdout + result.stderr
    if result.returncode != 0:
        raise AssertionError(output)
    return output


def test_the_contracts_hold_on_the_installed_package() -> None:
    output = lint_imports(cwd=REPO)
    assert "0 broken" in output
    assert "Only the API client wrapper imports the kubernetes client KEPT" in output


@pytest.fixture(scope="module")
def overlay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    """A copy of the package's sources as ``<tmp>/kubesage/{core,adapters}``, and the
    environment that makes the linter analyse that copy."""
    root = tmp_path_factory.mktemp("layers")
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in ("core", "adapters"):
        shutil.copytree(REPO / package, root / "kubesage" / package, ignore=skip)
    linter = importlib.util.find_spec("importlinter")
    assert linter is not None and linter.origin is not None
    site_packages = Path(linter.origin).parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(site_packages)])}
    yield root / "kubesage", env


def test_the_copy_is_clean_before_any_crossing(overlay: tuple[Path, dict[str, str]]) -> None:
    # Guards the test below: a failure there must come from the crossing, not the setup.
    package, env = overlay
    output = lint_imports(cwd=package.parent, env=env, isolated=True)
    assert "0 broken" in output


@pytest.mark.parametrize(
    ("module", "statement", "contract"),
    [
        (
            "core/policy",
            "import kubesage.core.k8s",
            "Decision packages import neither the Kubernetes layer, the CLI nor telemetry",
        ),
        (
            "core/sim",
            "from kubesage.core.telemetry import features",
            "Decision packages import neither the Kubernetes layer, the CLI nor telemetry",
        ),
        (
            "core/telemetry",
            "from kubesage.core.k8s import informer",
            "Telemetry sources do not import the Kubernetes layer",
        ),
        (
            "core/state",
            "import kubesage.adapters.gpu_training",
            "The core never imports an adapter",
        ),
        (
            "adapters/spark",
            "from kubesage.adapters.flink import client",
            "Adapters are independent of each other",
        ),
        (
            "core/k8s",
            "from kubernetes import client",
            "Only the API client wrapper imports the kubernetes client",
        ),
        (
            "core/dra",
            "from kubesage.core.loop import control",
            "Shared types, the Collector protocol, the metrics and the DRA types import no layer",
        ),
    ],
)
def test_a_module_that_crosses_a_layer_breaks_its_contract(
    overlay: tuple[Path, dict[str, str]], module: str, statement: str, contract: str
) -> None:
    package, env = overlay
    probe = package / module / "layer_probe.py"
    probe.write_text(f'"""Crosses a layer on purpose."""\n\n{statement}\n', encoding="utf-8")
    try:
        with pytest.raises(AssertionError) as failure:
            lint_imports(cwd=package.parent, env=env, isolated=True)
    finally:
        probe.unlink()
    output = str(failure.value)
    assert f"{contract} BROKEN" in " ".join(output.split())
    dotted = "kubesage." + module.replace("/", ".") + ".layer_probe"
    assert f"{dotted} ->" in output
