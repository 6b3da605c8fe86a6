"""The extras (extended resources, hugepages, host ports, …) of the pods on each node, as
kubesage's placements need them before the watch shows their bindings.

:class:`ExtrasLedger` keeps each pod's extras (read once per ``resourceVersion``) and the
pods kubesage placed whose binding the watch does not show yet; :func:`ledger_for`
gives the one ledger of a ClusterSync, shared by the secondary scheduler and the control
loop's binds. What the extras are and how a node's use is counted is
:mod:`kubesage.core.k8s.node_extras`.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from kubesage.core.k8s.node_extras import NO_EXTRAS, NodeExtras, Obj, PodExtras, pod_extras
from kubesage.core.k8s.schedulable import bound_node, pod_key
from kubesage.core.k8s.translate import TranslateError
from kubesage.core.types import Placement

UNASSUMED_GRACE_S = 30.0
"""How long a placed pod counts while its assumption has not shown yet. The control
loop's binds admit a pod (:meth:`ExtrasLedger.admit`) before the bind path assumes it:
in between, ``placement_of`` does not know it, and forgetting it then would let another
placement take its extras. A refused bind frees them at once (:meth:`ExtrasLedger.forget`);
one that failed otherwise, which may have landed, leaves them here this long."""


@dataclass
class _Placed:
    node: str
    extras: PodExtras
    since: float
    """``time.monotonic()`` when placed."""
    assumed: bool = False
    """Its assumption has been seen: once that is gone, so is the placement."""


@runtime_checkable
class BoundPods(Protocol):
    """Where the pods are (ClusterSync)."""

    def bound_pods(self) -> list[dict[str, Any]]: ...

    def placement_of(self, key: str) -> Placement | None: ...


class ExtrasLedger:
    """Each pod's extras, read once per ``resourceVersion``, and the pods kubesage
    placed whose binding the watch does not show yet (kept until it does, or until
    their assumption is gone; one never assumed for :data:`UNASSUMED_GRACE_S`).
    Thread-safe; it never calls out while locked."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._read: dict[str, tuple[str, PodExtras]] = {}
        self._older: dict[str, tuple[str, PodExtras]] = {}
        """The reads before the last :meth:`use`: kept while asked for again."""
        self._placed: dict[str, _Placed] = {}

    def extras_of(self, pod: Obj) -> PodExtras:
        """``pod``'s extras; none when its requests cannot be read (the core reports it)."""
        with self._lock:
            return self._extras(pod_key(pod), pod)

    def _extras(self, key: str, pod: Obj) -> PodExtras:
        version = str((pod.get("metadata") or {}).get("resourceVersion") or "")
        cached = self._read.get(key) or self._older.get(key)
        if cached is None or cached[0] != version:
            try:
                cached = (version, pod_extras(pod))
            except TranslateError:
                cached = (version, NO_EXTRAS)
        self._read[key] = cached
        return cached[1]

    def placed(self, pod: Obj, node: str) -> None:
        """``pod`` is being bound to ``node``."""
        with self._lock:
            key = pod_key(pod)
            self._placed[key] = _Placed(node, self._extras(key, pod), time.monotonic())

    def unplaced(self, pod: Obj) -> None:
        """Its bind failed."""
        self.forget(pod_key(pod))

    def forget(self, key: str) -> None:
        """The bind of the pod keyed ``key`` (:func:`pod_key`) failed."""
        with self._lock:
            self._placed.pop(key, None)

    def use(
        self,
        nodes: Mapping[str, Obj],
        node_names: Sequence[str],
        bound: Iterable[Obj],
        placement_of: Callable[[str], Placement | None],
        skip: str | None = None,
    ) -> NodeExtras:
        """What the ``bound`` pods and the ones placed use on ``node_names`` (a pod keyed
        ``skip`` left out); a placed pod whose assumption is gone from ``placement_of``
        (or never showed, :data:`UNASSUMED_GRACE_S`) is forgotten."""
        with self._lock:
            placed = dict(self._placed)
        now = time.monotonic()
        seen: set[str] = set()
        gone: set[str] = set()
        for key, entry in placed.items():  # placement_of is not called under our lock
            if placement_of(key) is not None:
                seen.add(key)
            elif entry.assumed or now - entry.since > UNASSUMED_GRACE_S:
                gone.add(key)
        use = NodeExtras(nodes, node_names)
        names = set(node_names)
        counted: list[tuple[str, PodExtras]] = []
        with self._lock:
            self._older, self._read = self._read, {}
            for pod in bound:
                key, node = pod_key(pod), bound_node(pod)
                self._placed.pop(key, None)  # the watch shows it bound
                if node in names and key != skip:
                    counted.append((node, self._extras(key, pod)))
            for key, entry in placed.items():
                if self._placed.get(key) is not entry:
                    continue  # gone meanwhile, or placed again since: decided next time
                if key in gone:
                    del self._placed[key]
                elif key in seen:
                    entry.assumed = True
            counted += [(e.node, e.extras) for key, e in self._placed.items() if key != skip]
        use.count_all(counted)
        return use

    def admit(self, pod: Obj, node_name: str, node: Obj, sync: BoundPods) -> str | None:
        """Why ``node`` refuses ``pod``'s extras now, naming the filter; None when they
        fit, and then ``pod`` counts there until its binding shows (or fails)."""
        key = pod_key(pod)
        use = self.use({node_name: node}, [node_name], sync.bound_pods(), sync.placement_of, key)
        refusal = use.refusal(self.extras_of(pod), node_name)
        if refusal is None:
            self.placed(pod, node_name)
        return refusal


_LEDGERS: weakref.WeakKeyDictionary[object, ExtrasLedger] = weakref.WeakKeyDictionary()
_LEDGERS_LOCK = threading.Lock()


def ledger_for(sync: object) -> ExtrasLedger:
    """The one ledger of a ClusterSync: the secondary scheduler and the control loop's
    binds on it see each other's placements before the watch shows them."""
    with _LEDGERS_LOCK:
        try:
            ledger = _LEDGERS.get(sync)
            if ledger is None:
                ledger = _LEDGERS[sync] = ExtrasLedger()
        except TypeError:  # not weakly referable: a ledger of its own
            ledger = ExtrasLedger()
        return ledger
