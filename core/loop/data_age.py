"""How old a collector's data really is: a stale snapshot counts from when its source
was last current.

A collector that falls back to its last content while its source fails (ClusterSync
while its list/watch is broken, say) may stamp the copy it serves with the time it
made the copy. The loop's data-age gate would then never see that data get old. So the
loop keeps, per collector, when its last snapshot that was not stale was taken, and a
stale snapshot stamped later than that is read as taken then — or, for a collector
that has never been current, as taken when the loop first saw it stale.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from kubesage.core.perception import Snapshot


class CurrentSince:
    """Per collector, when its data was last known current."""

    def __init__(self) -> None:
        self._current_at: dict[str, float] = {}

    def honest(self, name: str, snapshot: Snapshot[Any]) -> Snapshot[Any]:
        """``snapshot`` with ``taken_at`` no later than when ``name`` was last current."""
        if not snapshot.stale:
            self._current_at[name] = snapshot.taken_at
            return snapshot
        since = self._current_at.setdefault(name, snapshot.taken_at)
        if snapshot.taken_at <= since:
            return snapshot
        return dataclasses.replace(snapshot, taken_at=since)
