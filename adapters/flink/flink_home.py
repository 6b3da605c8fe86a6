"""Where a Flink distribution is: the directory that holds ``bin/flink``, ``lib/`` and ``conf/``.

``kubesage flink submit`` runs ``bin/flink run`` from it. The ``apache-flink`` wheel
ships a whole Flink inside its ``pyflink`` package, so a venv with that wheel is a
Flink distribution: ``make services`` creates one as ``.venv-flink`` at the root of a
checkout, and ``$KUBESAGE_FLINK_VENV`` points elsewhere. Nothing here depends on where
this package is installed; a caller that knows a better default venv (the checkout's,
for the tests and benchmarks) passes it.
"""

from __future__ import annotations

import os
from pathlib import Path

from kubesage.core.errors import ConfigError

FLINK_VENV_ENV = "KUBESAGE_FLINK_VENV"
DEFAULT_FLINK_VENV = Path(".venv-flink")
"""The venv ``make services`` creates, relative to the current directory."""


def flink_venv(default: Path = DEFAULT_FLINK_VENV) -> Path:
    """The Flink venv: ``$KUBESAGE_FLINK_VENV``, else ``default``."""
    configured = os.environ.get(FLINK_VENV_ENV)
    return Path(configured) if configured else default


def find_flink_home(venv: Path | None = None) -> Path:
    """The ``pyflink`` directory of the Flink venv (holds ``bin/``, ``lib/``, ``conf/``).

    ``venv`` defaults to :func:`flink_venv`.
    """
    venv = venv or flink_venv()
    for home in sorted(venv.glob("lib/python3*/site-packages/pyflink")):
        if (home / "bin" / "start-cluster.sh").is_file() and (home / "lib").is_dir():
            return home
    raise ConfigError(
        f"no Flink found in the venv '{venv}' (expected lib/python3*/site-packages/pyflink "
        f"with bin/ and lib/); run `make services` or set {FLINK_VENV_ENV}",
        field=FLINK_VENV_ENV,
    )
