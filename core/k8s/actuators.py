"""The control loop's actuators on a live cluster: the loop's actions as API calls.

Each actuator executes the actions of its kind and reports an
:class:`~kubesage.core.loop.reconciler.Outcome`; none raises for an answer of the API
server. What each call is, and how its answers map to outcomes:

========== =========================================================== =================
Action     API call                                                    Outcomes
========== =========================================================== =================
Bind       ``POST pods/{name}/binding`` through                        DONE; REFUSED: pod
           :class:`~kubesage.core.k8s.binder.Binder` (UID               gone (and no
           precondition, GPU annotations, retries); an evicted pod's   replacement yet),
           replacement found by :class:`LiveReplacements`; first,     bound elsewhere,
           ``GET pods/{name}``: the node checked against the pod's     the node ruled out
           spec and its MIG instance against the node's MIG state      by its spec, its
           (:class:`LiveEligibility`), then the pod's ResourceClaims   MIG re-layout not
           allocated and reserved (``PUT                               applied yet, its
           resourceclaims/{name}/status``)                             devices taken or
                                                                       its claims not
                                                                       satisfiable; FAILED
Evict      ``POST pods/{name}/eviction`` (policy/v1 Eviction, UID       see :class:`LiveEvictor`
           precondition)
Scale      merge patch of a Job's ``spec.parallelism`` or a            DONE; REFUSED: out
           PyTorchJob's elastic Worker replicas (read first: bounds)   of bounds, gone,
                                                                       conflict; FAILED
Patch      merge patch of a Job, PyTorchJob or FlinkDeployment         as Scale
LabelNode  merge patch of ``metadata.labels`` (None removes a label);  as Scale; FAILED:
           a MIG re-layout on a node with partitionable MIG devices    a MIG config with
           is carried by the binds' DRA allocations instead; else its  no ConfigMap to
           mig-parted config is merged into MIG Manager's ConfigMap    publish it in
           first (:mod:`~kubesage.core.k8s.node_labeler`)
========== =========================================================== =================

A refusal is the world saying no (a PodDisruptionBudget, bounds, an object that is
gone or changed): retrying the same action will not help until the world changes. A
failure is an error (5xx, throttling, no connection, forbidden) that a later tick may
retry. Flink REST rescales are not here: the Flink adapter executes those.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import urllib3

from kubesage.core.errors import DependencyError, InputError
from kubesage.core.k8s.api_reads import read_pod
from kubesage.core.k8s.api_results import DEFAULT_REQUEST_TIMEOUT_S, api_result, unexpected
from kubesage.core.k8s.api_status import api_causes, api_message, has_cause, retry_after_s
from kubesage.core.k8s.apiclient import (
    ApiClient,
    ApiException,
    BatchV1Api,
    CoreV1Api,
    CustomObjectsApi,
    PolicyV1Api,
    V1DeleteOptions,
    V1Eviction,
    V1ObjectMeta,
    V1Preconditions,
)
from kubesage.core.k8s.binder import Binder
from kubesage.core.k8s.binding import (
    AssumingView,
    BindActuator,
    NodeObjects,
    assume_and_bind,
)
from kubesage.core.k8s.disruption_budgets import budget_exceeded
from kubesage.core.k8s.dra_binding import ClaimAllocator
from kubesage.core.k8s.live_eligibility import LiveEligibility
from kubesage.core.k8s.mig_config_map import MigConfigMap, MigConfigPublisher
from kubesage.core.k8s.mig_manager import MIG_CONFIG_LABEL
from kubesage.core.k8s.node_labeler import LiveNodeLabeler
from kubesage.core.k8s.schedulable import is_terminating
from kubesage.core.k8s.scheduling_policy import NamespaceLabels
from kubesage.core.k8s.translate import pod_request
from kubesage.core.k8s.workloads import (
    MERGE_PATCH,
    ChangeRefusedError,
    Kind,
    kind_of,
    scale_needs_object,
    scale_patch,
)
from kubesage.core.loop.actions import (
    Action,
    ActionKind,
    Bind,
    Evict,
    ObjectRef,
    Patch,
    PodRef,
    Scale,
)
from kubesage.core.loop.reconciler import Actuator, Outcome, Result
from kubesage.core.policy.base import Policy
from kubesage.core.types import PodRequest

log = logging.getLogger(__name__)


_REMEMBERED_REPLACEMENTS = 4096
"""How many replacement pods :class:`LiveReplacements` remembers as taken."""
_NOT_SHAPE = frozenset({"name", "creation_time_s", "deletion_time_s"})
"""PodRequest fields that differ between a pod and its controller's replacement."""


DISRUPTION_BUDGET_CAUSE = "DisruptionBudget"
"""The cause an eviction refused by a PodDisruptionBudget carries (``policy/v1``)."""


class LiveEvictor:
    """Evict through the Eviction subresource, so PodDisruptionBudgets apply.

    - 200/201: DONE (the API server deletes the pod gracefully; its controller
      re-creates it and the loop re-places the new one).
    - 429 TooManyRequests with a ``DisruptionBudget`` cause: REFUSED with the API's
      message — a PodDisruptionBudget allows no disruption now. Not an error. When it
      also asks to retry (``retryAfterSeconds``: the budget's controller has not caught
      up with a change), FAILED instead: a later tick asks again, and the refusal is not
      remembered for five minutes. A 429 without that cause is throttling (API
      Priority and Fairness): FAILED, with the ``Retry-After`` the API server asked for.
    - 404 NotFound: DONE. The eviction's purpose — the pod no longer holds its node's
      resources — is already met (deleted, or evicted by an earlier attempt whose
      answer was lost); a plan may go on to use the capacity. The detail says so.
    - 409 Conflict (the UID precondition: the name now belongs to a new pod): REFUSED;
      the pod the reconciler decided on is gone and the new one was not its choice.
    - Anything else (a pod under two PDBs answers 500, no connection): FAILED.
    """

    def __init__(
        self, api: ApiClient, *, request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S
    ) -> None:
        # Any: called with _preload_content=False (the answer is a Status, not the
        # Eviction the generated signature promises).
        self._core: Any = CoreV1Api(api)
        self._policy: Any = PolicyV1Api(api)
        self.request_timeout_s = request_timeout_s

    @property
    def kinds(self) -> frozenset[ActionKind]:
        return frozenset({ActionKind.EVICT})

    def execute(self, action: Action) -> Result:
        if not isinstance(action, Evict):
            return unexpected(action)
        return self._evict(action.pod, dry_run=False)

    def rehearse(self, action: Action, before: Sequence[Action] = ()) -> Result | None:
        """The eviction with ``dryRun=All``: the API server checks the pod's
        PodDisruptionBudgets and the UID precondition and changes nothing. REFUSED when
        the real eviction would be, also when the evictions in ``before`` would have
        spent what its budget allows (a dry run sees the budget as it is now); None
        otherwise (a dry run or a read that fails cannot tell)."""
        if not isinstance(action, Evict):
            return None
        result = self._evict(action.pod, dry_run=True)
        if result.outcome != Outcome.DONE:
            return result if result.outcome == Outcome.REFUSED else None
        earlier = [step.pod for step in before if isinstance(step, Evict)]
        spent = budget_exceeded(
            self._core, self._policy, action.pod, earlier, self.request_timeout_s
        )
        return None if spent is None else Result(Outcome.REFUSED, spent)

    def _evict(self, pod: PodRef, *, dry_run: bool) -> Result:
        body = V1Eviction(
            api_version="policy/v1",
            kind="Eviction",
            metadata=V1ObjectMeta(name=pod.name, namespace=pod.namespace),
            delete_options=(
                V1DeleteOptions(preconditions=V1Preconditions(uid=pod.uid)) if pod.uid else None
            ),
        )
        try:
            self._core.create_namespaced_pod_eviction(
                pod.name,
                pod.namespace,
                body,
                _preload_content=False,
                _request_timeout=self.request_timeout_s,
                **({"dry_run": "All"} if dry_run else {}),
            ).read()
        except ApiException as exc:
            message = api_message(exc)
            if exc.status == 429 and has_cause(exc, DISRUPTION_BUDGET_CAUSE):
                reasons = "; ".join([message, *api_causes(exc)])
                wait = retry_after_s(exc)
                if wait:  # the budget is still being processed: ask again, not refused
                    return Result(
                        Outcome.FAILED,
                        f"evicting pod {pod}: {reasons}; the API server asks to retry after "
                        f"{wait:g} s",
                    )
                return Result(Outcome.REFUSED, f"eviction of pod {pod} refused: {reasons}")
            if exc.status == 429:  # throttled (API Priority and Fairness), not refused
                wait = retry_after_s(exc)
                later = f"; the API server asks to retry after {wait:g} s" if wait else ""
                return Result(Outcome.FAILED, f"evicting pod {pod}: throttled: {message}{later}")
            if exc.status == 404:
                return Result(Outcome.DONE, f"pod {pod} is already gone: {message}")
            if exc.status == 409:
                return Result(Outcome.REFUSED, f"pod {pod} was replaced: {message}")
            return Result(Outcome.FAILED, f"evicting pod {pod}: HTTP {exc.status}: {message}")
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            return Result(Outcome.FAILED, f"evicting pod {pod}: API server unreachable: {exc}")
        return Result(Outcome.DONE, f"pod {pod} evicted")


class LivePatcher:
    """Scale and Patch: merge patches of the workload kinds in
    :data:`~kubesage.core.k8s.workloads.PATCHABLE`."""

    def __init__(
        self, api: ApiClient, *, request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S
    ) -> None:
        # Any: the Job patch is called with _preload_content=False (the answer is not
        # needed, and a typed Job need not deserialise for the patch to have happened).
        self._batch: Any = BatchV1Api(api)
        self._custom = CustomObjectsApi(api)
        self.request_timeout_s = request_timeout_s

    @property
    def kinds(self) -> frozenset[ActionKind]:
        return frozenset({ActionKind.SCALE, ActionKind.PATCH})

    def execute(self, action: Action) -> Result:
        if isinstance(action, Scale):
            ref, what = action.workload, f"scale to {action.replicas}"
        elif isinstance(action, Patch):
            ref, what = action.obj, "patch"
        else:
            return unexpected(action)
        try:
            kind = kind_of(ref)
            if isinstance(action, Scale):
                current = self._read(kind, ref) if scale_needs_object(ref) else None
                patch = scale_patch(ref, action.replicas, current)
            else:
                patch = dict(action.patch)
            self._patch(kind, ref, patch)
        except ChangeRefusedError as exc:
            return Result(Outcome.REFUSED, str(exc))
        except ApiException as exc:
            return api_result(exc, f"{what} {ref}")
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            return Result(Outcome.FAILED, f"{what} {ref}: API server unreachable: {exc}")
        return Result(Outcome.DONE, f"{ref}: {what} applied")

    def _read(self, kind: Kind, ref: ObjectRef) -> Mapping[str, Any]:
        obj = self._custom.get_namespaced_custom_object(
            kind.group,
            kind.version,
            ref.namespace,
            kind.plural,
            ref.name,
            _request_timeout=self.request_timeout_s,
        )
        return obj if isinstance(obj, Mapping) else {}

    def _patch(self, kind: Kind, ref: ObjectRef, patch: Mapping[str, Any]) -> None:
        if kind.builtin:
            self._batch.patch_namespaced_job(
                ref.name,
                ref.namespace,
                dict(patch),
                _content_type=MERGE_PATCH,
                _preload_content=False,
                _request_timeout=self.request_timeout_s,
            ).read()
            return
        self._custom.patch_namespaced_custom_object(
            kind.group,
            kind.version,
            ref.namespace,
            kind.plural,
            ref.name,
            dict(patch),
            _content_type=MERGE_PATCH,
            _request_timeout=self.request_timeout_s,
        )


class LiveReplacements:
    """The pod a plan's Bind binds after the plan evicted it (the Replacements protocol of
    :class:`~kubesage.core.k8s.binding.BindActuator`).

    On a live cluster an evicted pod is deleted and its controller (ReplicaSet, Job,
    training operator) creates a replacement with a new name. So a Bind that carries its
    pod's owner reads the pod first: still there (same UID, not being deleted), it is
    the one bound. Otherwise the pending pods of the namespace (``spec.nodeName`` empty,
    as kube-scheduler selects them) are searched for one with the same owner (kind and
    name, API group) and the same request (all but the name), not being deleted, not
    taken by an earlier bind; the oldest is bound. None yet: the reason, and the plan
    is retried on a later tick.
    """

    def __init__(
        self, api: ApiClient, *, request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S
    ) -> None:
        # Any: called with _preload_content=False (raw JSON).
        self._core: Any = CoreV1Api(api)
        self.request_timeout_s = request_timeout_s
        self._taken: OrderedDict[str, None] = OrderedDict()

    def resolve(self, action: Bind) -> PodRef | str:
        pod, owner = action.pod, action.owner
        current = self._read(pod)
        if current is not None and _alive(current):
            uid = str((current.get("metadata") or {}).get("uid") or "")
            if not pod.uid or uid == pod.uid:
                return pod
        if owner is None:
            return f"pod {pod} is gone"
        candidates = [
            candidate
            for candidate in self._pending(pod.namespace)
            if _alive(candidate)
            and _owned_by(candidate, owner)
            and str(candidate["metadata"].get("uid") or "") not in self._taken
            and _same_shape(candidate, action.request)
        ]
        if not candidates:
            return (
                f"pod {pod} is gone and its owner {owner} has no pending replacement with "
                "the same request yet; the plan is retried on a later tick"
            )
        chosen = min(candidates, key=_age_order)
        metadata = chosen["metadata"]
        return PodRef(pod.namespace, str(metadata["name"]), str(metadata.get("uid") or ""))

    def took(self, pod: PodRef) -> None:
        if pod.uid:
            self._taken[pod.uid] = None
            while len(self._taken) > _REMEMBERED_REPLACEMENTS:
                self._taken.popitem(last=False)

    def _read(self, pod: PodRef) -> dict[str, Any] | None:
        return read_pod(self._core, pod, self.request_timeout_s)

    def _pending(self, namespace: str) -> list[dict[str, Any]]:
        try:
            answer = self._core.list_namespaced_pod(
                namespace,
                field_selector="spec.nodeName=",
                _preload_content=False,
                _request_timeout=self.request_timeout_s,
            )
            items = json.loads(answer.data).get("items") or []
        except ApiException as exc:
            raise DependencyError(
                f"listing pending pods of {namespace}: HTTP {exc.status}: {api_message(exc)}"
            ) from exc
        except (urllib3.exceptions.HTTPError, OSError, ValueError, AttributeError) as exc:
            raise DependencyError(f"listing pending pods of {namespace}: {exc}") from exc
        return [item for item in items if isinstance(item, dict) and item.get("metadata")]


def _age_order(pod: Mapping[str, Any]) -> tuple[str, str]:
    metadata = pod.get("metadata") or {}
    return str(metadata.get("creationTimestamp") or ""), str(metadata.get("name"))


def _alive(pod: Mapping[str, Any]) -> bool:
    """Not being deleted, not terminated: a pod a binding can still place."""
    phase = (pod.get("status") or {}).get("phase")
    return not is_terminating(pod) and phase not in ("Succeeded", "Failed")


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0] if "/" in api_version else ""


def _owned_by(pod: Mapping[str, Any], owner: ObjectRef) -> bool:
    for reference in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if (
            isinstance(reference, Mapping)
            and reference.get("kind") == owner.kind
            and reference.get("name") == owner.name
            and _group(str(reference.get("apiVersion") or "")) == _group(owner.api_version)
        ):
            return True
    return False


def _same_shape(pod: Mapping[str, Any], request: PodRequest) -> bool:
    """The pod asks for what ``request`` asks (resources, GPUs, QoS, priority, gang)."""
    try:
        theirs = pod_request(pod)
    except InputError:
        return False
    shape = set(_NOT_SHAPE)
    return theirs.model_dump(exclude=shape) == request.model_dump(exclude=shape)


def live_actuators(
    api_client: ApiClient,
    view: AssumingView,
    policy: Policy,
    *,
    binder: Binder | None = None,
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
    mig_config_map: MigConfigMap | None = None,
    namespace_labels: NamespaceLabels | None = None,
) -> list[Actuator]:
    """The actuators of a live cluster: bind (an evicted pod's replacement matched by
    :class:`LiveReplacements`; its node checked against the pod's spec by
    :class:`LiveEligibility` when ``view`` keeps the Node objects, as ClusterSync does),
    evict, scale/patch, label nodes.

    Binds go through the one bind path (:func:`~kubesage.core.k8s.binding.assume_and_bind`:
    accounted in ``view`` — the ClusterSync — before the Binding is posted). A pod that
    asks for GPUs through ResourceClaims gets the action's devices (a gang member's in
    ring order, a MIG slot's device or partition) allocated in its claims first
    (:class:`~kubesage.core.k8s.dra_binding.ClaimAllocator`). ``binder`` shares the
    extender's or secondary scheduler's Binder (its memory of bound pods) when given.
    ``mig_config_map``: where MIG Manager reads its mig-parted configs, so that a MIG
    re-layout's config is published there before its node is labelled
    (:mod:`~kubesage.core.k8s.node_labeler`). ``namespace_labels``: the namespaces'
    labels, for the running pods' anti-affinity terms that select namespaces by label.
    """
    post = binder or Binder(api_client, request_timeout_s=request_timeout_s)
    replacements = LiveReplacements(api_client, request_timeout_s=request_timeout_s)
    claims = ClaimAllocator(api_client, request_timeout_s=request_timeout_s)
    eligibility = (
        LiveEligibility(
            api_client,
            view,
            request_timeout_s=request_timeout_s,
            namespace_labels=namespace_labels,
        )
        if isinstance(view, NodeObjects)
        else None
    )
    return [
        BindActuator(assume_and_bind(view, post, policy, claims), replacements, eligibility),
        LiveEvictor(api_client, request_timeout_s=request_timeout_s),
        LivePatcher(api_client, request_timeout_s=request_timeout_s),
        LiveNodeLabeler(
            api_client,
            request_timeout_s=request_timeout_s,
            claims=claims,
            mig_configs=(
                MigConfigPublisher(api_client, mig_config_map, request_timeout_s=request_timeout_s)
                if mig_config_map is not None
                else None
            ),
        ),
    ]


# The embedded cluster's actuators live beside it; re-exported so the loop's wiring
# finds both kinds of cluster here.
from kubesage.core.k8s.embedded_actuators import embedded_actuators  # noqa: E402

__all__ = [
    "MIG_CONFIG_LABEL",
    "BindActuator",
    "LiveEligibility",
    "LiveEvictor",
    "LiveNodeLabeler",
    "LivePatcher",
    "LiveReplacements",
    "api_message",
    "embedded_actuators",
    "live_actuators",
]
