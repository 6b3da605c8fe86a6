"""pyproject lists every package directory, and the core never imports an adapter."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_directory_is_listed_in_pyproject() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    found = set()
    for top, name in (("core", "kubesage.core"), ("adapters", "kubesage.adapters")):
        for init in (ROOT / top).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / top).parts
            found.add(".".join((name, *relative)))
    assert found == listed


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
