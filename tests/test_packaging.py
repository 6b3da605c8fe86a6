"""pyproject lists every package directory and every shipped file; the core imports no adapter.

tests/test_wheel.py builds the wheel and runs it installed outside the checkout.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_directory_is_listed_in_pyproject() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    found = set()
    for top, name in (
        ("core", "kubesage.core"),
        ("adapters", "kubesage.adapters"),
        ("configs", "kubesage.configs"),
    ):
        for init in (ROOT / top).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / top).parts
            found.add(".".join((name, *relative)))
    assert found == listed


def test_package_data_covers_every_file_under_configs() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["kubesage.configs"]
    configs = ROOT / "configs"
    # setuptools expands package-data globs as Path.glob does: "*.yaml" is the top only.
    covered = {path for pattern in patterns for path in configs.glob(pattern)}
    files = {
        path
        for path in configs.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".py"
    }
    assert files - covered == set(), "add these to package-data (pyproject.toml)"


def test_core_never_imports_an_adapter() -> None:
    for path in (ROOT / "core").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node_ in ast.walk(tree):
            names = []
            if isinstance(node_, ast.Import):
                names = [alias.name for alias in node_.names]
            elif isinstance(node_, ast.ImportFrom) and node_.module:
                names = [node_.module]
            for name in names:
                assert not name.startswith("kubesage.adapters"), f"{path}: imports {name}"


MAX_MODULE_LINES = 500
"""One concept per module: past this a module holds several and is split along its seams."""


def test_no_module_is_over_the_size_limit() -> None:
    too_long = {
        str(path.relative_to(ROOT)): lines
        for top in ("core", "adapters")
        for path in (ROOT / top).rglob("*.py")
        if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert too_long == {}, f"split these modules (over {MAX_MODULE_LINES} lines)"
