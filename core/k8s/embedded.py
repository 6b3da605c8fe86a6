"""The embedded cluster ``kubesage serve`` decides on when no kubeconfig is given.

It is the synthetic openb-like cluster the simulator uses by default
(``configs/simulate.yaml``: 1,213 GPU nodes, seed 0) with the matching synthetic
workload as the policy's typical pods, so the extender and the webhook answer real
requests with no API server. Binds go into this ClusterState: a bound pod takes
its resources (on the GPUs the policy chooses) until it is evicted or the process
exits. An eviction (the control loop's, :meth:`EmbeddedCluster.evict`) gives the
pod's resources back and keeps the pod as pending — what its controller would
re-create on a real cluster — until the loop binds it again.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import ItemsView, Iterator, KeysView, Mapping, MutableMapping, ValuesView
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

from kubesage.core.errors import CapacityError, InputError
from kubesage.core.k8s.binding import (
    BindFunction,
    BindRefusedError,
    BindTarget,
    LockedState,
    assume_then_bind,
)
from kubesage.core.observability.logging import log_event
from kubesage.core.policy.base import Policy
from kubesage.core.sim.settings import DEFAULT_SYNTHETIC_NODES, DEFAULT_SYNTHETIC_PODS
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.traces.synthetic import synthetic_cluster, synthetic_workload
from kubesage.core.types import NodeSpec, Placement, PodRequest

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BoundPod:
    """A pod bound in the embedded cluster."""

    node: str
    request: PodRequest
    placement: Placement
    namespace: str = ""
    name: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    """What the pod was submitted with (a gang's annotations, a Spark executor's role),
    kept while it is bound and given back to it when it is evicted."""


class _Named(Protocol):
    @property
    def namespace(self) -> str: ...

    @property
    def name(self) -> str: ...


_P = TypeVar("_P", bound=_Named)


class PodsByKey(MutableMapping[str, _P], Generic[_P]):
    """Pods by UID (or ``namespace/name`` when they have none), also found by
    ``namespace/name`` (:meth:`find`): a name is held once, as on a real cluster."""

    def __init__(self) -> None:
        self._pods: dict[str, _P] = {}
        self._by_name: dict[tuple[str, str], str] = {}

    def find(self, namespace: str, name: str) -> str | None:
        """The key of the pod held as ``namespace/name``, if one is."""
        return self._by_name.get((namespace, name))

    def __getitem__(self, key: str) -> _P:
        return self._pods[key]

    def __setitem__(self, key: str, pod: _P) -> None:
        if key in self._pods:
            del self[key]
        self._pods[key] = pod
        if pod.name:
            self._by_name[(pod.namespace, pod.name)] = key

    def __delitem__(self, key: str) -> None:
        pod = self._pods.pop(key)
        if self._by_name.get((pod.namespace, pod.name)) == key:
            del self._by_name[(pod.namespace, pod.name)]

    def __iter__(self) -> Iterator[str]:
        return iter(self._pods)

    def __len__(self) -> int:
        return len(self._pods)

    # The dict's own methods, not MutableMapping's generic ones (the extender's binds
    # and every loop tick go through these).
    def __contains__(self, key: object) -> bool:
        return key in self._pods

    def get(self, key: str, default: Any = None) -> Any:
        return self._pods.get(key, default)

    def keys(self) -> KeysView[str]:
        return self._pods.keys()

    def items(self) -> ItemsView[str, _P]:
        return self._pods.items()

    def values(self) -> ValuesView[_P]:
        return self._pods.values()


BoundPods = PodsByKey[BoundPod]
"""The bound pods (:class:`PodsByKey`)."""


@dataclass(frozen=True)
class PendingPod:
    """A pod of the embedded cluster waiting to be bound: evicted, or submitted new."""

    namespace: str
    name: str
    uid: str
    request: PodRequest
    evicted_from: str = ""
    """The node it was evicted from ("" for a pod submitted new)."""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    """What the pod was submitted with (a Spark executor's ``spark-role`` label, say)."""


class EmbeddedCluster(LockedState):
    """A ClusterState owned by this process, with the workload that shaped it."""

    def __init__(self, nodes: list[NodeSpec], workload: list[PodRequest], description: str):
        super().__init__(ClusterState(nodes))
        self.workload = workload
        """Typical pods for policies that need them (FGD)."""
        self.description = description
        self.bound = BoundPods()
        """Bound pods by UID (or namespace/name when the bind carried no UID)."""
        self.pending: PodsByKey[PendingPod] = PodsByKey()
        """Pods waiting to be bound (evicted, or submitted), keyed as :attr:`bound`."""
        self._submitted = 0

    @classmethod
    def synthetic(
        cls,
        nodes: int = DEFAULT_SYNTHETIC_NODES,
        *,
        seed: int = 0,
        pods: int = DEFAULT_SYNTHETIC_PODS,
    ) -> EmbeddedCluster:
        """The simulator's default synthetic cluster and workload (any size)."""
        specs = synthetic_cluster(nodes, seed=seed)
        workload = synthetic_workload(pods, seed=seed)
        return cls(
            specs,
            workload,
            f"embedded synthetic openb-like cluster ({nodes} nodes, seed {seed})",
        )

    def fill(self, policy: Policy, gpu_allocation: float, *, seed: int = 0) -> int:
        """Place workload pods with ``policy`` until ``gpu_allocation`` (0..1) of the GPUs
        are taken; return how many pods were placed. Gives a benchmark a busy cluster."""
        rng = np.random.default_rng(seed)
        placed = 0
        with self.locked() as (state, _):
            while state.gpu_allocation_ratio < gpu_allocation:
                request = self.workload[int(rng.integers(len(self.workload)))]
                decision = policy.decide(state, request)
                if decision.placement is None:
                    break
                state.allocate(request, decision.placement)
                placed += 1
        return placed

    # -- binding ---------------------------------------------------------------------

    def binder(self, policy: Policy) -> BindFunction:
        """Bind into this cluster through the one bind path
        (:func:`~kubesage.core.k8s.binding.assume_then_bind`): the pod takes its
        resources on the GPUs ``policy`` chooses. A name is bound once, as the API
        server's Binding does it: a retried bind of a bound pod to the same node is done
        already (the Binder counts the API's 409 naming that node as done); to another
        node it is refused (already assigned), and so is one whose UID is not the bound
        pod's (the UID precondition), or of a pod whose requests this cluster never saw."""
        assume_and_post = assume_then_bind(self, policy, self._posted)

        def bind(target: BindTarget) -> None:
            where = f"pod {target.namespace}/{target.name}"
            with self.locked() as (state, _):
                key = self.bound.find(target.namespace, target.name)
                if key is not None:
                    done = self.bound[key]
                    bound_uid = _uid_of(key, target.namespace, target.name)
                    if target.uid and bound_uid and target.uid != bound_uid:
                        raise BindRefusedError(
                            f"{where}: Precondition failed: UID in precondition: "
                            f"{target.uid}, UID in object meta: {bound_uid}"
                        )
                    if done.node == target.node:
                        return  # a retried bind of the same pod: already done
                    raise BindRefusedError(f"{where} is already bound to {done.node}")
                pending = self._pending_key(target.namespace, target.name)
                pending_uid = self.pending[pending].uid if pending is not None else ""
                if target.uid and pending_uid and target.uid != pending_uid:
                    raise BindRefusedError(
                        f"{where}: Precondition failed: UID in precondition: "
                        f"{target.uid}, UID in object meta: {pending_uid}"
                    )
                if target.request is None:
                    raise BindRefusedError(
                        f"{where} was never filtered or prioritized here, so the embedded "
                        "cluster does not know its requests"
                    )
                if target.node not in state.node_index:
                    raise BindRefusedError(f"node '{target.node}' is not in the embedded cluster")
                assume_and_post(target)

        return bind

    def assume(self, pod: Mapping[str, Any], request: PodRequest, placement: Placement) -> None:
        """Take ``request``'s resources at ``placement`` for ``pod``."""
        metadata = pod["metadata"]
        with self.locked() as (state, _):
            try:
                state.allocate(request, placement)
            except CapacityError as exc:
                raise BindRefusedError(
                    f"pod {metadata['namespace']}/{metadata['name']} on {placement.node}: {exc}"
                ) from exc
            key = _key(pod)
            namespace, name = str(metadata["namespace"]), str(metadata["name"])
            pending_key = key if key in self.pending else self._pending_key(namespace, name)
            pending = self.pending.pop(pending_key) if pending_key is not None else None
            if pending is not None and pending.uid:
                key = pending.uid  # a bind without a UID binds the pending pod, UID and all
            labels = pending.labels if pending else metadata.get("labels") or {}
            annotations = pending.annotations if pending else metadata.get("annotations") or {}
            self.bound[key] = BoundPod(
                placement.node,
                request,
                placement,
                namespace=namespace,
                name=name,
                labels=dict(labels),
                annotations=dict(annotations),
            )

    def finish_binding(self, pod: Mapping[str, Any]) -> None:
        """Nothing to do: a bind here is final at once (no watch to confirm it)."""

    def forget(self, pod: Mapping[str, Any]) -> None:
        """Give back what :meth:`assume` took for ``pod``."""
        metadata = pod["metadata"]
        with self.locked() as (state, _):
            key = _key(pod)
            if key not in self.bound:  # bound without a UID: under the pending pod's
                key = self.bound.find(str(metadata["namespace"]), str(metadata["name"])) or key
            bound = self.bound.pop(key, None)
            if bound is not None:
                state.release(bound.request, bound.placement)

    def evict(self, namespace: str, name: str, uid: str = "") -> PendingPod | None:
        """Evict a bound pod: give its resources back and keep it as pending (to be
        re-placed). None when no such pod is bound (gone already, or still pending);
        with ``uid``, only the pod with that UID is evicted."""
        with self.locked() as (state, _):
            key = self._bound_key(namespace, name, uid)
            if key is None:
                return None
            bound = self.bound.pop(key)
            state.release(bound.request, bound.placement)
            bound_uid = _uid_of(key, namespace, name)
            evicted = PendingPod(
                namespace,
                name,
                bound_uid,
                bound.request,
                bound.node,
                labels=bound.labels,
                annotations=bound.annotations,
            )
            self.pending[key] = evicted
        log_event(log, logging.INFO, "embedded_evict", pod=f"{namespace}/{name}", node=bound.node)
        return evicted

    def submit(
        self,
        namespace: str,
        name: str,
        request: PodRequest,
        *,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
    ) -> PendingPod:
        """A new pod, pending until something binds it (the control loop does). It gets
        a UID of its own, as the API server gives every pod it creates: a pod deleted and
        submitted again under its name is another pod to whatever keys pods by UID. The
        UIDs are the same from run to run (the n-th submission's, by name)."""
        with self.locked():
            if (
                self._pending_key(namespace, name) is not None
                or self._bound_key(namespace, name, "") is not None
            ):
                raise InputError(f"pod {namespace}/{name} exists already in the embedded cluster")
            self._submitted += 1
            uid = uuid.uuid5(_SUBMITTED_UIDS, f"{self._submitted}/{namespace}/{name}")
            pod = PendingPod(
                namespace,
                name,
                str(uid),
                request,
                labels=dict(labels or {}),
                annotations=dict(annotations or {}),
            )
            self.pending[pod.uid] = pod
        return pod

    def delete(self, namespace: str, name: str) -> bool:
        """Delete a pod, bound (its resources freed) or pending; False if there is none."""
        with self.locked() as (state, _):
            key = self._bound_key(namespace, name, "")
            if key is not None:
                bound = self.bound.pop(key)
                state.release(bound.request, bound.placement)
                return True
            pending = self._pending_key(namespace, name)
            return pending is not None and self.pending.pop(pending, None) is not None

    def _bound_key(self, namespace: str, name: str, uid: str) -> str | None:
        if uid:
            return uid if uid in self.bound else None
        return self.bound.find(namespace, name)

    def _pending_key(self, namespace: str, name: str) -> str | None:
        """The key of the pending pod ``namespace/name``, if there is one."""
        return self.pending.find(namespace, name)

    @staticmethod
    def _posted(target: BindTarget, placement: Placement | None) -> None:
        """The embedded cluster's binding: already recorded by :meth:`assume`; logged."""
        log_event(
            log,
            logging.INFO,
            "embedded_bind",
            pod=f"{target.namespace}/{target.name}",
            node=target.node,
            gpus=list(placement.gpu_indices) if placement else [],
        )


_SUBMITTED_UIDS = uuid.UUID("6f0c1b1e-55a2-4c36-9d0e-7a3c0f5b2d41")
"""The namespace of submitted pods' name-based UIDs (any fixed UUID would do)."""


def _uid_of(key: str, namespace: str, name: str) -> str:
    """The UID a bound pod's key holds ("" for a pod bound without one)."""
    return "" if key == f"{namespace}/{name}" else key


def _key(pod: Mapping[str, Any]) -> str:
    metadata = pod["metadata"]
    return str(metadata.get("uid") or f"{metadata['namespace']}/{metadata['name']}")
