"""The cluster state the extender reads, and the one way a bind changes it.

- :class:`StateView` is consistent access to a ClusterState (its lock held):
  :class:`~kubesage.core.k8s.informer.ClusterSync` on a live cluster,
  :class:`LockedState` (the embedded cluster) for a state owned by this process.
- :func:`assume_then_bind` is the single bind path, for every policy: under the
  state's lock it checks that the pod still fits the chosen node, takes where on that
  node it goes — the placement already decided (the control loop's gang ring order or
  plan) or else the policy's (:meth:`Policy.placement_on`: the GPUs or MIG slot) —
  and *assumes* the pod there — records the placement in the state — before the
  binding is posted, so the next request already sees those resources taken. A
  failed post undoes the assumption. A pod filter never saw (no request known) is
  posted without accounting.
- :class:`BindActuator` runs the control loop's Bind actions through it. A Bind that
  names the pod's owner (a plan's re-placement of a pod it evicted) binds, when that
  pod is gone, its controller's replacement instead (:class:`Replacements`). On a live
  cluster it first checks the node against the pod's own spec (:data:`NodeCheck`,
  :func:`node_refusal`: the secondary scheduler's node filters), so no reconciler's
  plan binds a pod to a cordoned, tainted or unselected node.
- :func:`assume_and_bind` posts through the API server's Binding subresource
  (:class:`~kubesage.core.k8s.binder.Binder`, which does the API call; this module
  decides what it posts), after writing the chosen devices into the pod's
  ResourceClaims when it has some (:mod:`~kubesage.core.k8s.dra_binding`; rolled back
  if the bind fails); the embedded cluster posts into itself.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from kubesage.core.errors import CapacityError, KubesageError
from kubesage.core.k8s.node_eligibility import (
    UNSCHEDULABLE_TAINT,
    advertises_plugin_gpus,
    asks_plugin_gpus,
    node_fits_pod,
    tolerates,
)
from kubesage.core.k8s.unsupported_constraints import not_implemented, unsupported_constraints
from kubesage.core.loop.actions import Action, ActionKind, Bind, PodRef
from kubesage.core.loop.reconciler import Outcome, Result
from kubesage.core.policy.base import Policy
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.types import Placement, PodRequest

if TYPE_CHECKING:
    from kubesage.core.k8s.dra_binding import ClaimAllocator


class BindRefusedError(KubesageError):
    """A binding kubesage itself refuses (the pod does not fit, or is bound elsewhere)."""


class StateView(Protocol):
    """Consistent access to the cluster state (ClusterSync and the embedded cluster)."""

    def locked(self) -> AbstractContextManager[tuple[ClusterState, Sequence[str]]]:
        """Hold the state's lock; yield the state and its node names."""
        ...


class AssumingView(StateView, Protocol):
    """A state that can account a pod before the API shows it bound."""

    def assume(self, pod: Mapping[str, Any], request: PodRequest, placement: Placement) -> None:
        """Account ``pod`` at ``placement`` now."""
        ...

    def forget(self, pod: Mapping[str, Any]) -> None:
        """Undo :meth:`assume` (the bind failed)."""
        ...

    def finish_binding(self, pod: Mapping[str, Any]) -> None:
        """The bind of the assumed ``pod`` succeeded: its assumption may now expire if the
        watch never confirms it (kube-scheduler's FinishBinding)."""
        ...


@dataclass(frozen=True)
class BindTarget:
    """A pod to bind, with its translated request when filter or prioritize saw it."""

    namespace: str
    name: str
    uid: str
    node: str
    request: PodRequest | None
    placement: Placement | None = None
    """A placement already decided (the control loop's gang ring order, a defrag plan's
    MIG slot): honoured exactly instead of asking the policy; refused if it no longer fits."""
    annotations: Mapping[str, str] = field(default_factory=dict)
    """Extra annotations to set on the pod with the binding (a gang member's rank)."""

    @property
    def pod(self) -> dict[str, Any]:
        """The pod's identity as a v1 Pod fragment (what a view keys assumptions by)."""
        return {"metadata": {"uid": self.uid, "namespace": self.namespace, "name": self.name}}


BindFunction = Callable[[BindTarget], None]
"""Binds a pod to a node or raises a KubesageError saying why not."""


@runtime_checkable
class NodeCheck(Protocol):
    """Whether the target's pod may go to its node by its own spec."""

    def __call__(self, target: BindTarget) -> str | None:
        """Why not (None: it may); raises a KubesageError when it cannot tell (the API
        server unreachable). A pass may set room aside for the pod on its node."""
        ...

    def bind_failed(self, target: BindTarget) -> None:
        """The bind of a target this check passed was refused (it surely did not happen):
        the room the check set aside goes. (A bind that failed otherwise may have landed:
        its room stays until the watch tells.)"""
        ...


@runtime_checkable
class NodeObjects(Protocol):
    """A cache of the cluster's Node objects (ClusterSync; the embedded cluster has none)."""

    def nodes(self) -> Mapping[str, Mapping[str, Any]]:
        """The Node objects by name (read-only)."""
        ...


def node_refusal(pod: Mapping[str, Any], node: Mapping[str, Any]) -> str | None:
    """Why kube-scheduler's node filters keep ``pod`` off ``node``, naming the filter; None
    when they let it go there. The verdict is the secondary scheduler's
    (:func:`~kubesage.core.k8s.node_eligibility.node_fits_pod`); the reason names the
    first filter that fails, in the order that function applies them. A pod with
    required constraints kubesage cannot honour (inter-pod affinity, strict spreads:
    :mod:`~kubesage.core.k8s.unsupported_constraints`) fits no node: kube-scheduler
    places it."""
    unsupported = unsupported_constraints(pod)
    if unsupported:
        return f"{not_implemented(unsupported)}; left to kube-scheduler"
    if node_fits_pod(pod, node):
        return None
    spec = pod.get("spec") or {}
    node_spec = node.get("spec") or {}
    name = (node.get("metadata") or {}).get("name") or "?"
    labels: Mapping[str, str] = (node.get("metadata") or {}).get("labels") or {}
    if asks_plugin_gpus(pod) and not advertises_plugin_gpus(node):
        return f"NodeResourcesFit: node {name} advertises no nvidia.com/gpu (Insufficient)"
    tolerations: Sequence[Mapping[str, Any]] = spec.get("tolerations") or []
    cordon = {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}
    if node_spec.get("unschedulable") and not tolerates(tolerations, cordon):
        return f"NodeUnschedulable: node {name} is cordoned (spec.unschedulable)"
    for taint in node_spec.get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(tolerations, taint):
            value = f"={taint['value']}" if taint.get("value") else ""
            return (
                f"TaintToleration: node {name} has the taint "
                f"{taint.get('key')}{value}:{taint.get('effect')}, which the pod does not tolerate"
            )
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return f"NodeAffinity: node {name} does not match the pod's nodeSelector {key}={value}"
    return f"NodeAffinity: node {name} does not match the pod's required node affinity"


PostBinding = Callable[[BindTarget, Placement | None], None]
"""Makes a binding happen (the API call) with the placement assumed for it (None when
the pod's request is unknown); raises a KubesageError when it did not happen."""


class PodBinder(Protocol):
    """Posts a Binding (kubesage.core.k8s.binder.Binder)."""

    def bind(
        self,
        namespace: str,
        name: str,
        uid: str,
        node: str,
        *,
        annotations: dict[str, str] | None = None,
    ) -> None:
        """Bind or raise a KubesageError."""
        ...


def assume_then_bind(view: AssumingView, policy: Policy, post: PostBinding) -> BindFunction:
    """The bind path: assume the pod on the policy's placement, post, undo on failure."""

    def bind(target: BindTarget) -> None:
        pod = target.pod
        placement: Placement | None = None
        if target.request is not None:
            with view.locked() as (state, _):
                node = state.node_index.get(target.node)
                if node is None or not state.feasible(target.request, np.array([node]))[0]:
                    raise BindRefusedError(
                        f"pod {target.namespace}/{target.name} no longer fits on {target.node}"
                    )
                placement = target.placement or policy.placement_on(state, node, target.request)
                if placement.node != target.node:
                    raise BindRefusedError(
                        f"pod {target.namespace}/{target.name}: placement on {placement.node} "
                        f"does not match the node {target.node}"
                    )
                try:
                    view.assume(pod, target.request, placement)
                except CapacityError as exc:
                    raise BindRefusedError(
                        f"pod {target.namespace}/{target.name} no longer fits its placement "
                        f"on {target.node}: {exc}"
                    ) from exc
        try:
            post(target, placement)
        except BaseException:  # any error: an unfinished bind's assumption never expires
            if placement is not None:
                view.forget(pod)
            raise
        if placement is not None:
            view.finish_binding(pod)

    return bind


def assume_and_bind(
    view: AssumingView,
    binder: PodBinder,
    policy: Policy,
    claims: ClaimAllocator | None = None,
) -> BindFunction:
    """:func:`assume_then_bind` posting a Binding through the API server.

    The GPUs the policy picks are recorded on the pod by the binding's annotations, so
    the state rebuilt from the API later agrees with this one. With ``claims`` (the
    secondary scheduler's and the control loop's binds), a pod that asks for its GPUs
    through ResourceClaims gets them allocated to the chosen devices and reserved for it
    first (:mod:`~kubesage.core.k8s.dra_binding`, as kube-scheduler's PreBind); a bind
    that then fails rolls that allocation back. Without (the extender's binds:
    kube-scheduler allocated the claims already) claims are left as they are.
    """
    # Imported on use: only the live-cluster path needs the Kubernetes client.
    from kubesage.core.k8s.binder import (
        BindConflictError,
        PodGatedError,
        PodGoneError,
        placement_annotations,
    )
    from kubesage.core.k8s.dra_allocation import AllocationRefusedError

    def post(target: BindTarget, placement: Placement | None) -> None:
        allocated = None
        if claims is not None:
            try:
                allocated = claims.allocate(
                    None,
                    namespace=target.namespace,
                    name=target.name,
                    uid=target.uid,
                    placement=placement,
                    request=target.request,
                )
            except AllocationRefusedError as exc:
                raise BindRefusedError(str(exc)) from exc  # re-decided, never half-applied
        annotations = {
            **(placement_annotations(placement) if placement else {}),
            **(allocated.annotations if allocated else {}),
            **target.annotations,
        }
        try:
            binder.bind(
                target.namespace,
                target.name,
                target.uid,
                target.node,
                annotations=annotations or None,
            )
        except KubesageError as exc:
            if claims is not None and allocated is not None:
                claims.release(allocated)
            if isinstance(exc, PodGoneError | PodGatedError | BindConflictError):
                raise BindRefusedError(str(exc)) from exc  # the world said no: not an error
            raise

    return assume_then_bind(view, policy, post)


class LockedState:
    """A ClusterState behind a lock: the :class:`StateView` of a state owned here."""

    def __init__(self, state: ClusterState):
        self.state = state
        self._lock = threading.RLock()

    def locked(self) -> AbstractContextManager[tuple[ClusterState, Sequence[str]]]:
        return _Held(self._lock, self)


class _Held:
    def __init__(self, lock: threading.RLock, owner: LockedState):
        self._lock = lock
        self._owner = owner

    def __enter__(self) -> tuple[ClusterState, Sequence[str]]:
        self._lock.acquire()
        # Read under the lock: the state may be replaced (embedded_nodes) while waiting.
        state = self._owner.state
        return state, state.node_names

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


class Replacements(Protocol):
    """Finds the pod a Bind with an owner binds on a live cluster, where an evicted pod is
    gone and its controller creates a replacement under a new name."""

    def resolve(self, action: Bind) -> PodRef | str:
        """The action's own pod while it still exists; else the oldest pending pod with
        the same owner and request shape that no earlier bind took; else why none (a
        str). Raises a KubesageError when the API cannot be read."""
        ...

    def took(self, pod: PodRef) -> None:
        """``pod`` (a replacement) was bound: no later action may take it."""
        ...


class BindActuator:
    """The control loop's Bind actions, through the one bind path.

    The action's placement (node, GPUs in ring order, MIG slot) is honoured exactly and
    its annotations are posted with the binding. A pod that no longer fits there, is
    gone, or is bound elsewhere is REFUSED (the plan it belongs to stops and is retried);
    any other failure is FAILED.

    With ``replacements`` (a live cluster), a Bind that names its pod's owner
    (:attr:`Bind.owner`) and whose pod is gone binds the replacement its controller
    created (same owner, same request shape, not taken by an earlier bind); with no
    replacement yet it is REFUSED, so the plan is rolled back and retried next tick.

    With ``eligibility`` (a live cluster), the pod that is to be bound is checked against
    its node first (cordon, taints and tolerations, nodeSelector, required node
    affinity: :func:`node_refusal`); a node its spec rules out is REFUSED with the
    filter named, before anything is accounted or posted.
    """

    def __init__(
        self,
        bind: BindFunction,
        replacements: Replacements | None = None,
        eligibility: NodeCheck | None = None,
    ) -> None:
        self._bind = bind
        self._replacements = replacements
        self._eligibility = eligibility

    @property
    def kinds(self) -> frozenset[ActionKind]:
        return frozenset({ActionKind.BIND})

    def execute(self, action: Action) -> Result:
        if not isinstance(action, Bind):
            return Result(Outcome.FAILED, f"{type(action).__name__} is not a Bind")
        pod, placement, request = action.pod, action.placement, action.request
        if action.owner is not None and self._replacements is not None:
            try:
                resolved = self._replacements.resolve(action)
            except KubesageError as exc:
                return Result(Outcome.FAILED, str(exc))
            if isinstance(resolved, str):
                return Result(Outcome.REFUSED, resolved)
            pod = resolved
            if pod != action.pod:  # the accounting names the pod it holds
                request = request.model_copy(update={"name": str(pod)})
        target = BindTarget(
            pod.namespace,
            pod.name,
            pod.uid,
            placement.node,
            request,
            placement=placement,
            annotations=action.annotations,
        )
        try:
            refusal = self._eligibility(target) if self._eligibility is not None else None
        except KubesageError as exc:
            return Result(Outcome.FAILED, str(exc))
        if refusal is not None:
            return Result(Outcome.REFUSED, f"pod {pod} may not go to {placement.node}: {refusal}")
        try:
            self._bind(target)
        except BindRefusedError as exc:  # it surely did not happen: its room goes now
            if self._eligibility is not None:
                self._eligibility.bind_failed(target)
            return Result(Outcome.REFUSED, str(exc))
        except KubesageError as exc:  # it may have landed: the room is kept a while
            return Result(Outcome.FAILED, str(exc))
        gpus = ",".join(str(gpu) for gpu in placement.gpu_indices)
        where = f"bound to {placement.node}" + (f" (GPUs {gpus})" if gpus else "")
        if pod == action.pod:
            return Result(Outcome.DONE, where)
        assert self._replacements is not None
        self._replacements.took(pod)
        replaced = f"{action.pod} is gone: its replacement {pod} (owner {action.owner})"
        return Result(Outcome.DONE, f"{replaced} {where}")
