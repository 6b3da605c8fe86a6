"""``python -m kubesage.core.cli`` runs the ``kubesage`` command."""

from kubesage.core.cli.main import app

app()
