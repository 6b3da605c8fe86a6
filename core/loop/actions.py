"""What a reconciler asks the world to do: typed actions and multi-step plans.

A reconciler never acts. It returns :class:`Action` values (and :class:`Plan` values
for what must happen in order, all or nothing); the control loop hands each to the
actuator that executes its kind, within the tick's budgets, in dry-run or live mode,
and records the outcome in the audit log. Every action carries the reconciler that
asked for it and an explanation a person can read.

An action's :attr:`Action.key` is its stable identity — the same request on a later
tick, or from a new leader after a failover, has the same key — so the loop can tell
an action that is already done (in the audit log) from a new one. A pod's identity is
its UID where known (:attr:`Action.subject_uid`): a pod deleted and re-created under
the same name (a Kubeflow ``<job>-worker-N``, a StatefulSet's pod) is a new pod, and
binding or evicting it is a new action.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from kubesage.core.types import Placement, PodRequest


def digest(parts: Iterable[object], length: int = 12) -> str:
    """A short stable hash of ``parts`` (JSON-serialisable; anything else by ``str``): the
    same parts give the same digest on any tick, process or leader. Plan ids use it."""
    body = json.dumps(list(parts), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(body.encode()).hexdigest()[:length]


class ActionKind(StrEnum):
    """The kinds of change the loop can make; one actuator executes each."""

    BIND = "bind"
    """Bind a pending pod to a node (with its GPUs / MIG slot recorded)."""
    EVICT = "evict"
    """Evict a running pod through the Eviction subresource (PodDisruptionBudgets apply)."""
    SCALE = "scale"
    """Set a workload's replicas (a Job's parallelism, a PyTorchJob's elastic replicas)."""
    PATCH = "patch"
    """A merge patch of one object (e.g. a FlinkDeployment's parallelism overrides)."""
    LABEL_NODE = "label-node"
    """Set labels on a node (``nvidia.com/mig.config`` for mig-parted)."""
    FLINK_RESCALE = "flink-rescale"
    """Rescale a Flink job in place through its REST API."""


@dataclass(frozen=True, slots=True)
class PodRef:
    """A pod by namespace and name (and uid, when known: then it is part of the identity
    of an action on the pod, so a pod re-created under the same name is another pod)."""

    namespace: str
    name: str
    uid: str = ""

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """Any namespaced API object: ``apiVersion``, ``kind``, namespace and name."""

    api_version: str
    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"


@dataclass(frozen=True, kw_only=True)
class Action:
    """One change, asked for by one reconciler, with its reason."""

    reconciler: str
    """Name of the reconciler that asked (``gpu-defrag``, ``flink-autoscaler`` …)."""
    explanation: str
    """Why, in one or two human sentences."""
    plan: str | None = None
    """Id of the :class:`Plan` this action is a step of; None for a lone action."""

    @property
    def kind(self) -> ActionKind:
        raise NotImplementedError

    @property
    def target(self) -> str:
        """What the action changes, as the audit log names it."""
        raise NotImplementedError

    def payload(self) -> Mapping[str, Any]:
        """What the action sets (JSON-serialisable); part of its identity."""
        return {}

    @property
    def subject_uid(self) -> str:
        """The UID of the object acted on, when known ("" otherwise): part of the key."""
        return ""

    @property
    def key(self) -> str:
        """Stable identity: kind, target, plan, payload and the target's UID when known
        (not the explanation). Without a UID the key is what it was before UIDs counted,
        so audit records written then still match; a record without the UID does not
        match an action that has one (the action is done again once: a pod already bound
        or evicted answers that, and the actuator reports it)."""
        parts: list[object] = [str(self.kind), self.target, self.plan, self.payload()]
        if self.subject_uid:
            parts.append({"uid": self.subject_uid})
        return digest(parts, 16)


@dataclass(frozen=True, kw_only=True)
class Bind(Action):
    """Bind ``pod`` at ``placement`` (node, GPUs or MIG slot)."""

    pod: PodRef
    request: PodRequest
    placement: Placement
    """Honoured exactly: the node, the GPUs (in ring order for a gang) or the MIG slot."""
    annotations: Mapping[str, str] = field(default_factory=dict)
    """Set on the pod with the binding (e.g. a gang member's rank)."""
    owner: ObjectRef | None = None
    """The pod's controller, for a pod a plan evicts before re-placing it: on a live
    cluster the evicted pod is gone and its controller's replacement (a new name, the
    same owner and request) is bound instead. Not part of the key: the same intent."""

    @property
    def kind(self) -> ActionKind:
        return ActionKind.BIND

    @property
    def target(self) -> str:
        return str(self.pod)

    @property
    def subject_uid(self) -> str:
        return self.pod.uid

    def payload(self) -> Mapping[str, Any]:
        return {
            "node": self.placement.node,
            "gpus": list(self.placement.gpu_indices),
            "mig_start": self.placement.mig_start,
            "annotations": dict(self.annotations),
        }


@dataclass(frozen=True, kw_only=True)
class Evict(Action):
    """Evict ``pod`` (its controller re-creates it; the loop re-places it)."""

    pod: PodRef
    request: PodRequest | None = None
    """The pod's request, when known (what a plan re-places)."""

    @property
    def kind(self) -> ActionKind:
        return ActionKind.EVICT

    @property
    def target(self) -> str:
        return str(self.pod)

    @property
    def subject_uid(self) -> str:
        return self.pod.uid


@dataclass(frozen=True, kw_only=True)
class Scale(Action):
    """Set ``workload``'s replicas to ``replicas``."""

    workload: ObjectRef
    replicas: int

    @property
    def kind(self) -> ActionKind:
        return ActionKind.SCALE

    @property
    def target(self) -> str:
        return str(self.workload)

    def payload(self) -> Mapping[str, Any]:
        return {"replicas": self.replicas}


@dataclass(frozen=True, kw_only=True)
class Patch(Action):
    """A JSON merge patch (RFC 7386) of ``obj``."""

    obj: ObjectRef
    patch: Mapping[str, Any]

    @property
    def kind(self) -> ActionKind:
        return ActionKind.PATCH

    @property
    def target(self) -> str:
        return str(self.obj)

    def payload(self) -> Mapping[str, Any]:
        return dict(self.patch)


@dataclass(frozen=True, kw_only=True)
class LabelNode(Action):
    """Set ``labels`` on ``node`` (a value of None removes the label)."""

    node: str
    labels: Mapping[str, str | None]
    mig_parted: Mapping[str, Any] | None = None
    """For a MIG re-layout (``nvidia.com/mig.config``): the mig-parted config the label
    names (``version: v1``, ``mig-configs: {<name>: […]}``), published where MIG Manager
    reads it before the label is set. Not part of the step's identity: the name is the
    layout's digest."""

    @property
    def kind(self) -> ActionKind:
        return ActionKind.LABEL_NODE

    @property
    def target(self) -> str:
        return f"node/{self.node}"

    def payload(self) -> Mapping[str, Any]:
        return dict(self.labels)


@dataclass(frozen=True, kw_only=True)
class FlinkRescale(Action):
    """Rescale Flink job ``job_id`` at ``jobmanager`` to per-vertex ``parallelism``."""

    jobmanager: str
    job_id: str
    parallelism: Mapping[str, int]
    """Vertex id → new parallelism."""

    @property
    def kind(self) -> ActionKind:
        return ActionKind.FLINK_RESCALE

    @property
    def target(self) -> str:
        return f"flink/{self.job_id}"

    def payload(self) -> Mapping[str, Any]:
        return dict(self.parallelism)


@dataclass(frozen=True, kw_only=True)
class Reservation:
    """Capacity a plan holds in the loop's state before its first step acts."""

    request: PodRequest
    placement: Placement


@dataclass(frozen=True, kw_only=True)
class Plan:
    """Steps that must all happen, in order, or be undone (a migration: evict the pods
    in the way, re-place them, bind the waiting pod).

    The loop first reserves :attr:`reservations` in its state (so nothing else takes
    the target while the plan runs), then executes :attr:`steps` in order; on a step
    that fails or is refused it stops, releases the reservations and records the plan
    as rolled back — the steps already done are listed in the audit log, and an
    evicted pod is re-created by its controller and re-placed by the loop, so no pod
    is lost.
    """

    id: str
    """Unique per plan, stable across ticks for the same intent. Whether a plan is done
    is decided from its steps' keys, not from the id: it is done while every step is
    still the last action done on its target (an id that restarts from an in-memory
    counter on a new leader does not make a new plan look done)."""
    reconciler: str
    explanation: str
    steps: tuple[Action, ...]
    reservations: tuple[Reservation, ...] = field(default_factory=tuple)

    @property
    def key(self) -> str:
        """Stable identity: the id and the steps' keys (not the explanation)."""
        body = json.dumps(["plan", self.id, [step.key for step in self.steps]])
        return hashlib.sha256(body.encode()).hexdigest()[:16]
