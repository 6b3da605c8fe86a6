"""How a message names a few of many things: the first few, then how many in all."""

from __future__ import annotations

from collections.abc import Sequence


def a_few(names: Sequence[str], shown: int = 5) -> str:
    """The first ``shown`` of ``names`` in their order, and how many there are when more."""
    listed = ", ".join(names[:shown])
    return f"{listed}, … ({len(names)} in all)" if len(names) > shown else listed
