"""The errors of reading Kubernetes objects into the core's model (``translate``)."""

from __future__ import annotations

from kubesage.core.errors import InputError


class TranslateError(InputError):
    """A Pod or Node object the core cannot read; the message names the field path."""

    def __init__(self, message: str, *, path: str):
        super().__init__(f"{path}: {message}")
        self.path = path


class UnsupportedPodError(TranslateError):
    """A valid pod outside the core's model; the caller should leave it to the default."""


class UnfittablePodError(UnsupportedPodError):
    """A valid pod no node can hold (more GPUs than any node has): every node fails it."""
