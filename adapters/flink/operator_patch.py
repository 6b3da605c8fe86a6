"""Rescaling through the Flink Kubernetes Operator: a FlinkDeployment patch.

The operator applies ``pipeline.jobvertex-parallelism-overrides`` — a comma-separated
``<vertex id>:<parallelism>`` list in ``spec.flinkConfiguration`` — by upgrading the
job (in place when the adaptive scheduler runs it, else from a savepoint). This module
builds that patch from a decision, checks its shape (vertex ids are 32 hex digits,
parallelism a positive integer, no vertex twice), and applies it as a JSON merge patch
with the kubernetes client's ``CustomObjectsApi`` when a client is given.

:class:`FlinkDeploymentPatcher` is what ``kubesage flink autoscale --flink-deployment``
acts through: it writes every vertex's target parallelism of a decision (the operator
replaces the whole key), then treats the rescale as pending — and patches nothing
more — until an observation shows the job RUNNING at those parallelisms (done) or the
rescale timeout passes (timed out). API failures (404, 403, 422, unreachable) are
:class:`OperatorApplyError` s naming the FlinkDeployment.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import urllib3

from kubesage.adapters.flink.autoscaler import ScalingDecision
from kubesage.adapters.flink.loop_rescale import DEFAULT_RESCALE_TIMEOUT_S
from kubesage.adapters.flink.observation import SETTLED_STATUSES, Observation
from kubesage.core.errors import DependencyError, InputError
from kubesage.core.k8s.v1_models import namespaced_name

log = logging.getLogger(__name__)

OVERRIDES_KEY = "pipeline.jobvertex-parallelism-overrides"
GROUP = "flink.apache.org"
VERSION = "v1beta1"
PLURAL = "flinkdeployments"
MERGE_PATCH = "application/merge-patch+json"
_VERTEX_ID = re.compile(r"^[0-9a-f]{32}$")
_ENTRY = re.compile(r"^([0-9a-f]{32}):([1-9][0-9]*)$")
REQUEST_TIMEOUT_S = 10.0
"""How long one request to the Kubernetes API may take (a hung API server must not
stall the autoscaler's tick)."""


class OperatorPatchError(InputError):
    """A parallelism override that the Flink operator would reject or misread."""


class OperatorApplyError(DependencyError):
    """The Kubernetes API refused or failed the FlinkDeployment patch."""


def format_overrides(parallelism: Mapping[str, int]) -> str:
    """``{vertex: p}`` → ``"vertex:p,…"`` (sorted, so equal plans give equal patches)."""
    if not parallelism:
        raise OperatorPatchError("no vertices to override")
    for vertex_id, value in parallelism.items():
        if not _VERTEX_ID.match(vertex_id):
            raise OperatorPatchError(
                f"vertex id '{vertex_id}' is not 32 lowercase hex digits (a JobVertexID)"
            )
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise OperatorPatchError(
                f"parallelism of vertex {vertex_id} must be ≥ 1, got {value!r}"
            )
    return ",".join(f"{vertex_id}:{parallelism[vertex_id]}" for vertex_id in sorted(parallelism))


def parse_overrides(text: str) -> dict[str, int]:
    """The inverse of ``format_overrides``; names the entry that is malformed."""
    result: dict[str, int] = {}
    for index, raw in enumerate(text.split(",")):
        entry = raw.strip()
        match = _ENTRY.match(entry)
        if match is None:
            raise OperatorPatchError(
                f"{OVERRIDES_KEY} entry {index} '{entry}' is not "
                "'<32-hex vertex id>:<parallelism ≥ 1>'"
            )
        if match.group(1) in result:
            raise OperatorPatchError(f"{OVERRIDES_KEY} names vertex {match.group(1)} twice")
        result[match.group(1)] = int(match.group(2))
    return result


def deployment_patch(
    parallelism: Mapping[str, int], *, existing: str | None = None
) -> dict[str, Any]:
    """The merge patch for a FlinkDeployment; ``existing`` overrides are kept unless replaced."""
    merged = parse_overrides(existing) if existing else {}
    merged.update(parallelism)
    return {"spec": {"flinkConfiguration": {OVERRIDES_KEY: format_overrides(merged)}}}


def validate_patch(patch: Mapping[str, Any]) -> dict[str, int]:
    """Checks a patch's shape; the overrides it sets."""
    spec = patch.get("spec")
    if not isinstance(spec, Mapping):
        raise OperatorPatchError("patch has no 'spec' object")
    conf = spec.get("flinkConfiguration")
    if not isinstance(conf, Mapping):
        raise OperatorPatchError("patch has no 'spec.flinkConfiguration' object")
    value = conf.get(OVERRIDES_KEY)
    if not isinstance(value, str):
        raise OperatorPatchError(f"'spec.flinkConfiguration.{OVERRIDES_KEY}' must be a string")
    extra = (
        sorted(set(patch) - {"spec"})
        + [f"spec.{key}" for key in sorted(set(spec) - {"flinkConfiguration"})]
        + [f"spec.flinkConfiguration.{key}" for key in sorted(set(conf) - {OVERRIDES_KEY})]
    )
    if extra:
        raise OperatorPatchError(f"patch touches more than the overrides: {extra}")
    return parse_overrides(value)


@dataclass(frozen=True)
class FlinkDeploymentRef:
    """A FlinkDeployment by namespace and name."""

    namespace: str
    name: str

    @classmethod
    def parse(cls, text: str, option: str = "--flink-deployment") -> FlinkDeploymentRef:
        """``NAMESPACE/NAME``; an InputError naming ``option`` if it is not one."""
        return cls(*namespaced_name(text, option, "FlinkDeployment"))

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


def _api_error(exc: Exception, verb: str, deployment: FlinkDeploymentRef) -> OperatorApplyError:
    """A clear error for a failed ``verb`` of ``deployment`` (an ApiException or no answer)."""
    status = getattr(exc, "status", None)
    if not isinstance(status, int) or status == 0:
        return OperatorApplyError(
            f"cannot reach the Kubernetes API to {verb} FlinkDeployment {deployment}: {exc}"
        )
    said = _status_message(getattr(exc, "body", None)) or str(getattr(exc, "reason", "") or "")
    why = f": {said}" if said else ""
    if status == 404:
        return OperatorApplyError(
            f"no FlinkDeployment {deployment.name} in namespace {deployment.namespace} "
            f"(HTTP 404 on {verb}; is the name right, is the Flink Kubernetes Operator's CRD "
            f"installed?){why}"
        )
    if status == 403:
        return OperatorApplyError(
            f"not allowed to {verb} FlinkDeployment {deployment} (HTTP 403: the user needs "
            f"'{verb}' on {PLURAL}.{GROUP} in namespace {deployment.namespace}){why}"
        )
    if status == 422:
        return OperatorApplyError(
            f"the API server refused the {verb} of FlinkDeployment {deployment} as invalid "
            f"(HTTP 422){why}"
        )
    return OperatorApplyError(f"{verb} of FlinkDeployment {deployment} failed: HTTP {status}{why}")


def _status_message(body: object) -> str:
    """The ``message`` of a Kubernetes ``Status`` body ('' when there is none)."""
    try:
        document = json.loads(body) if isinstance(body, str | bytes) else None
    except ValueError:
        return ""
    message = document.get("message") if isinstance(document, dict) else None
    return message if isinstance(message, str) else ""


def state_loss(deployment: Mapping[str, Any]) -> str | None:
    """Why the operator would apply a parallelism override by restarting the job from
    empty state (None: it keeps its state). Without the adaptive scheduler
    (``jobmanager.scheduler: adaptive``, which rescales in place) an override is a full
    upgrade in ``spec.job.upgradeMode``, and the operator's default, ``stateless``,
    starts the job afresh."""
    spec = deployment.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    job = spec.get("job")
    if not isinstance(job, Mapping):
        return None  # a session cluster: its jobs are not upgraded through this object
    conf = spec.get("flinkConfiguration")
    conf = conf if isinstance(conf, Mapping) else {}
    if str(conf.get("jobmanager.scheduler", "")).strip().lower() == "adaptive":
        return None
    mode = job.get("upgradeMode")
    if mode not in (None, "stateless"):
        return None
    told = "spec.job.upgradeMode is stateless" if mode else "spec.job sets no upgradeMode"
    return (
        f"{told} (the operator's default) and flinkConfiguration has no jobmanager.scheduler: "
        "adaptive, so the operator applies a parallelism override by a stateless upgrade, "
        "which restarts the job from empty state"
    )


def connect_deployment(
    deployment: FlinkDeploymentRef,
    kubeconfig: str | None = None,
    context: str | None = None,
    *,
    allow_stateless: bool = False,
) -> Any:
    """A ``CustomObjectsApi`` on the configured cluster that has read ``deployment``.

    The cluster is found as ``kubectl`` finds it
    (:func:`~kubesage.core.k8s.apiclient.load_api_client`); InputError when none is
    configured, or when a rescale would restart the job from empty state
    (:func:`state_loss`) unless ``allow_stateless``; OperatorApplyError when the
    FlinkDeployment cannot be read (404, 403, no answer).
    """
    from kubesage.core.k8s.apiclient import CustomObjectsApi, load_api_client

    api = load_api_client(kubeconfig, context)
    if api is None:
        raise InputError(
            f"FlinkDeployment {deployment}: no Kubernetes cluster configured (give "
            "--kubeconfig, set KUBECONFIG, or run in a pod with a service account)"
        )
    custom_objects = CustomObjectsApi(api)
    why = state_loss(check_deployment(custom_objects, deployment))
    if why is not None and not allow_stateless:
        raise InputError(
            f"FlinkDeployment {deployment}: {why}; set spec.job.upgradeMode to savepoint or "
            "last-state, or run the job with the adaptive scheduler, or pass "
            "--allow-stateless-upgrade to rescale it anyway"
        )
    if why is not None:
        log.warning("FlinkDeployment %s: %s (--allow-stateless-upgrade)", deployment, why)
    return custom_objects


def check_deployment(
    custom_objects: Any,
    deployment: FlinkDeploymentRef,
    *,
    request_timeout_s: float = REQUEST_TIMEOUT_S,
) -> dict[str, Any]:
    """Reads ``deployment`` (it exists and may be read); OperatorApplyError if not."""
    from kubesage.core.k8s.apiclient import ApiException

    try:
        result = custom_objects.get_namespaced_custom_object(
            GROUP,
            VERSION,
            deployment.namespace,
            PLURAL,
            deployment.name,
            _request_timeout=request_timeout_s,
        )
    except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
        raise _api_error(exc, "get", deployment) from exc
    return dict(result) if isinstance(result, Mapping) else {"result": result}


def apply_patch(
    custom_objects: Any,
    *,
    namespace: str,
    name: str,
    parallelism: Mapping[str, int],
    existing: str | None = None,
    request_timeout_s: float = REQUEST_TIMEOUT_S,
) -> dict[str, Any]:
    """Patches FlinkDeployment ``namespace/name`` through a ``kubernetes.client.CustomObjectsApi``.

    Returns the patched object as the API server returned it; OperatorApplyError
    naming the object when the API refuses (404, 403, 422, …) or does not answer.
    """
    from kubesage.core.k8s.apiclient import ApiException

    patch = deployment_patch(parallelism, existing=existing)
    validate_patch(patch)
    try:
        result = custom_objects.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            name,
            patch,
            _content_type=MERGE_PATCH,
            _request_timeout=request_timeout_s,
        )
    except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
        raise _api_error(exc, "patch", FlinkDeploymentRef(namespace, name)) from exc
    return dict(result) if isinstance(result, Mapping) else {"result": result}


PatchState = Literal["dry-run", "patched", "pending", "done", "timed-out", "failed"]


@dataclass(frozen=True)
class PatchOutcome:
    """What the patcher did with a decision, or how a pending patch ended."""

    state: PatchState
    deployment: FlinkDeploymentRef
    overrides: Mapping[str, int]
    """Vertex id → parallelism written (or that would be, or that is awaited)."""
    message: str

    @property
    def succeeded(self) -> bool:
        """Flink runs at the patched parallelism."""
        return self.state == "done"

    def describe(self) -> str:
        return f"FlinkDeployment {self.deployment}: {self.message}"


@dataclass(frozen=True)
class PendingPatch:
    """Overrides written and not yet observed, since ``since_s`` (observation time)."""

    overrides: Mapping[str, int]
    since_s: float


def _differences(overrides: Mapping[str, int], running: Mapping[str, int]) -> str:
    return ", ".join(
        f"{vertex}: {wanted} wanted, {running.get(vertex, 'not')} running"
        for vertex, wanted in sorted(overrides.items())
        if running.get(vertex) != wanted
    )


class FlinkDeploymentPatcher:
    """Applies decisions by patching one FlinkDeployment; a patch stays pending until
    observed or ``timeout_s`` passes (see the module docstring)."""

    def __init__(
        self,
        deployment: FlinkDeploymentRef,
        custom_objects: Any = None,
        *,
        timeout_s: float = DEFAULT_RESCALE_TIMEOUT_S,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> None:
        self.deployment = deployment
        self.custom_objects = custom_objects
        """A ``CustomObjectsApi`` (None: nothing can be applied, only dry runs)."""
        self.timeout_s = timeout_s
        self.request_timeout_s = request_timeout_s
        self.pending: PendingPatch | None = None

    def _outcome(
        self, state: PatchState, overrides: Mapping[str, int], message: str
    ) -> PatchOutcome:
        return PatchOutcome(state, self.deployment, dict(overrides), message)

    def settle(self, observation: Observation) -> PatchOutcome | None:
        """How the pending patch ended by ``observation`` (None: none pending, or still
        pending): ``done`` once the job is RUNNING with every overridden vertex at its
        parallelism, ``timed-out`` once ``timeout_s`` has passed without that."""
        pending = self.pending
        if pending is None:
            return None
        running = {vertex.vertex_id: vertex.parallelism for vertex in observation.vertices}
        waited_s = observation.time_s - pending.since_s
        settled = observation.job_state == "RUNNING" and all(
            vertex.status in SETTLED_STATUSES for vertex in observation.vertices
        )
        if settled and not _differences(pending.overrides, running):
            self.pending = None
            return self._outcome(
                "done",
                pending.overrides,
                f"the job runs at the patched parallelism ({waited_s:.0f} s)",
            )
        if waited_s >= self.timeout_s:
            self.pending = None
            now = _differences(pending.overrides, running) or f"job {observation.job_state}"
            return self._outcome(
                "timed-out",
                pending.overrides,
                f"the patched parallelism did not show up within {self.timeout_s:g} s ({now}); "
                "the override stays in the spec, the rescale counts as failed",
            )
        return None

    def apply(self, decision: ScalingDecision, *, dry_run: bool = False) -> PatchOutcome:
        """Patches the overrides of ``decision`` (every vertex's target parallelism);
        while a patch is pending, patches nothing. Never raises."""
        overrides = {vertex.vertex_id: vertex.proposed for vertex in decision.vertices}
        pending = self.pending
        if pending is not None:
            running = {vertex.vertex_id: vertex.current for vertex in decision.vertices}
            now = _differences(pending.overrides, running) or "the job is not running yet"
            return self._outcome(
                "pending",
                pending.overrides,
                f"the patch of {decision.time_s - pending.since_s:.0f} s ago has not shown up "
                f"yet ({now}); not patched again until it does or {self.timeout_s:g} s pass",
            )
        try:
            patch = deployment_patch(overrides)
            validate_patch(patch)
            if dry_run:
                text = json.dumps(patch, sort_keys=True)
                return self._outcome("dry-run", overrides, f"dry run, would merge-patch {text}")
            if self.custom_objects is None:
                raise OperatorApplyError(f"no Kubernetes API client to patch {self.deployment}")
            apply_patch(
                self.custom_objects,
                namespace=self.deployment.namespace,
                name=self.deployment.name,
                parallelism=overrides,
                request_timeout_s=self.request_timeout_s,
            )
        except (OperatorApplyError, OperatorPatchError) as exc:
            return self._outcome("failed", overrides, str(exc))
        except Exception as exc:  # it reports, it never raises into the loop
            log.exception("patching FlinkDeployment %s failed", self.deployment)
            return self._outcome("failed", overrides, f"{type(exc).__name__}: {exc}")
        self.pending = PendingPatch(dict(overrides), decision.time_s)
        value = format_overrides(overrides)
        return self._outcome(
            "patched",
            overrides,
            f"set {OVERRIDES_KEY}={value}; pending until Flink runs at it "
            f"(up to {self.timeout_s:g} s)",
        )
