"""Where kubesage's own files are: the user cache, and the configuration shipped in the package.

Shipped configuration (the PPO model, the metric map, example topologies, scheduling
policies, the simulate defaults) lives in the repository's ``configs/`` folder, which
installs as the ``kubesage.configs`` package: :func:`shipped_file` finds a file there
through :mod:`importlib.resources`, so an editable checkout and a wheel installed
anywhere read the same files, and no module walks up from its own location.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from kubesage.core.errors import ConfigError

SHIPPED_PACKAGE = "kubesage.configs"
"""The package that holds the repository's ``configs/`` folder once installed."""
SHARED_DATA_ENV = "KUBESAGE_SHARED_DATA"
"""The folder holding the shared traces (``openb/``, ``genai/``), when set."""


def cache_dir() -> Path:
    """``$KUBESAGE_CACHE_DIR``, else ``$XDG_CACHE_HOME/kubesage``, else ``~/.cache/kubesage``.

    A leading ``~`` is expanded (a Docker ``ENV`` or a systemd unit does not), and a
    relative ``$XDG_CACHE_HOME`` is ignored, as the XDG Base Directory spec says."""
    if explicit := os.environ.get("KUBESAGE_CACHE_DIR"):
        return Path(explicit).expanduser()
    base = Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser()
    if not base.is_absolute():
        base = Path.home() / ".cache"
    return base / "kubesage"


def shipped_file(relative: str) -> Path:
    """The shipped file at ``relative`` (``/``-separated, under ``configs/``).

    Raises ConfigError naming the file when the installation does not have it.
    """
    root = resources.files(SHIPPED_PACKAGE)
    target = root.joinpath(*relative.split("/"))
    path = Path(str(target))
    if not path.exists():
        raise ConfigError(
            f"the installed kubesage package has no shipped file '{relative}' (looked in {root})"
        )
    return path


def shipped_dir(relative: str) -> Path:
    """The shipped folder at ``relative`` (for listing, e.g. ``topologies``)."""
    path = shipped_file(relative)
    if not path.is_dir():
        raise ConfigError(f"shipped path '{relative}' is not a folder")
    return path


def shared_trace_dir(trace: str) -> Path | None:
    """The shared trace ``trace`` (``openb`` or ``genai``): ``$KUBESAGE_SHARED_DATA/<trace>``
    when the variable is set (it alone decides), else ``shared/data/<trace>`` beside the
    checkout kubesage runs from, else beside the current folder; None when the chosen
    place has no such folder. The traces are never copied into the repository.

    Raises ConfigError when the variable names no folder: a mistyped path would
    otherwise fall back to synthetic data without a word."""
    if explicit := os.environ.get(SHARED_DATA_ENV):
        root = Path(explicit).expanduser()
        if not root.is_dir():
            raise ConfigError(
                f"{SHARED_DATA_ENV} is set to '{explicit}', which is not a folder "
                "(unset it to look beside the checkout)"
            )
        roots = [root]
    else:
        checkout = Path(str(resources.files(SHIPPED_PACKAGE))).resolve().parent
        roots = [checkout.parent / "shared" / "data", Path.cwd().parent / "shared" / "data"]
    return next((root / trace for root in roots if (root / trace).is_dir()), None)
