"""The example topologies shipped with kubesage, and the lookup that lets a name stand for one.

The repository's ``configs/topologies/*.yaml`` install with the package
(:func:`kubesage.core.paths.shipped_dir`), so ``kubesage topology show dgx-h100-pod``
and the adapters' default topologies work from a wheel installed anywhere. A name
is the file's stem (``dgx-h100-pod``) or its file name (``dgx-h100-pod.yaml``).
"""

from __future__ import annotations

from pathlib import Path

from kubesage.core.errors import InputError
from kubesage.core.paths import shipped_dir

EXAMPLES_DIR = "topologies"
"""The shipped folder of example Topology YAMLs (under ``configs/``)."""


def example_paths() -> dict[str, Path]:
    """Every shipped example topology, by name (file stem), in name order."""
    return {path.stem: path for path in sorted(shipped_dir(EXAMPLES_DIR).glob("*.yaml"))}


def example_topology(name: str) -> Path:
    """The shipped example called ``name`` (``dgx-h100-pod`` or ``dgx-h100-pod.yaml``).

    Raises InputError naming the shipped examples when there is none by that name.
    """
    examples = example_paths()
    stem = name.removesuffix(".yaml").removesuffix(".yml")
    if stem not in examples:
        raise InputError(
            f"no topology file '{name}' and no shipped example of that name; "
            f"examples: {', '.join(examples) or 'none installed'}"
        )
    return examples[stem]


def topology_file(path_or_name: Path | str) -> Path:
    """A Topology YAML given by path, or by a shipped example's name when no such file exists.

    A file of that name in the current folder wins over the example, so a user's own
    file is never shadowed.
    """
    path = Path(path_or_name)
    if path.exists() or path.parent != Path("."):
        return path
    return example_topology(path.name)
