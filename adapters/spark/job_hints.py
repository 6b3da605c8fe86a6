"""What a Spark job tells the placement besides its executors' shape: where its input
lies, and the traffic shape assumed without an event log.

Both the command line (``kubesage spark conf --input-locality …``) and the control
loop's ``spark-placement`` reconciler (the executors'
``kubesage.io/spark-input-locality`` annotation) read input locality in the same
form, ``rack-or-zone=fraction,…``; this module parses it once for both.
"""

from __future__ import annotations

from kubesage.adapters.spark.shuffle_model import ShuffleProfile
from kubesage.core.errors import InputError

INPUT_LOCALITY_ANNOTATION = "kubesage.io/spark-input-locality"
"""Where the application's input lies: ``rack-or-zone=fraction,…`` (as ``kubesage spark
conf --input-locality``, which sets it on every executor); the loop reads it from the
first executor (by id) that has it."""

DEFAULT_PROFILE = ShuffleProfile((1 << 30,), input_bytes=1 << 30)
"""Without an event log: one all-to-all shuffle as large as the input (only the
relative figures matter)."""


def parse_locality(text: str | None, source: str = "--input-locality") -> dict[str, float]:
    """``rack-a1=0.6,zone-b=0.2`` → {name: fraction}; errors name ``source`` (the option
    or annotation it came from) and the bad item. Names are checked against a topology
    later (:func:`~kubesage.adapters.spark.shuffle_model.rack_locality`)."""
    hints: dict[str, float] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        name, sep, value = item.partition("=")
        try:
            if not sep:
                raise ValueError
            fraction = float(value)
        except ValueError:
            raise InputError(
                f"{source} item '{item}' is not name=fraction (e.g. rack-a1=0.6)"
            ) from None
        name = name.strip()
        if name in hints:
            raise InputError(
                f"{source} names {name!r} twice ({hints[name]:g} and {fraction:g}): give "
                "each rack or zone once"
            )
        hints[name] = fraction
    return hints
