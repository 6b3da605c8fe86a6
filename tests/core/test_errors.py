"""The error tree drawn in core/errors.py is the tree the classes form."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import kubesage.adapters
import kubesage.core
from kubesage.core import errors
from kubesage.core.errors import KubesageError

_BRANCH = re.compile(r"^[│├└─ ]*(?P<name>[A-Z]\w+)\b")


def drawn_tree() -> dict[str, str | None]:
    """``{class name: parent name}`` as the module docstring draws it."""
    doc = errors.__doc__ or ""
    block = doc.split("::", 1)[1].split("\n\n", 2)[1]
    parents: dict[str, str | None] = {}
    stack: list[tuple[int, str]] = []
    for line in block.splitlines():
        match = _BRANCH.match(line)
        if match is None:
            continue
        depth = match.start("name")  # deeper classes are drawn further right
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parents[match.group("name")] = stack[-1][1] if stack else None
        stack.append((depth, match.group("name")))
    return parents


def test_the_drawing_matches_the_classes() -> None:
    defined = {
        name: cls
        for name, cls in vars(errors).items()
        if inspect.isclass(cls)
        and issubclass(cls, KubesageError)
        and cls.__module__ == errors.__name__
    }
    actual = {
        name: (None if cls is KubesageError else cls.__base__.__name__)
        for name, cls in defined.items()
    }
    assert drawn_tree() == actual


def test_every_error_the_package_defines_is_a_kubesage_error() -> None:
    offenders = []
    for package in (kubesage.core, kubesage.adapters):
        for module_info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if module_info.name.endswith(("fake_nvml", "__main__")):
                continue  # the NVML fake mirrors pynvml's own NVMLError
            try:
                module = importlib.import_module(module_info.name)
            except ModuleNotFoundError as exc:
                if exc.name == "pyflink":  # Flink job scripts run inside Flink's own Python
                    continue
                raise
            for name, cls in vars(module).items():
                if (
                    inspect.isclass(cls)
                    and issubclass(cls, Exception)
                    and cls.__module__ == module.__name__
                    and not name.startswith("_")
                    and not issubclass(cls, KubesageError)
                ):
                    offenders.append(f"{module.__name__}.{name}")
    assert offenders == []
