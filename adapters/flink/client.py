"""A typed client for the Flink REST API (the JobManager's web port).

Every method returns a pydantic model from :mod:`rest_models` or raises a
:class:`~kubesage.adapters.flink.errors.FlinkError`:

- connection errors, timeouts and 5xx are retried with bounded exponential backoff
  (``attempts`` tries in all), then raise ``FlinkUnavailable``;
- 404 raises ``FlinkNotFound`` at once (an unknown job stays unknown);
- another 4xx, a body that is not JSON, or JSON that lacks a documented field raises
  ``FlinkResponseError`` naming the endpoint and the field.

``transport`` takes any httpx transport, so tests run this client unchanged against
``httpx.MockTransport`` replaying recorded replies.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx
import tenacity
from pydantic import BaseModel, ValidationError

from kubesage.adapters.flink.errors import (
    FlinkError,
    FlinkNotFound,
    FlinkResponseError,
    FlinkUnavailable,
)
from kubesage.adapters.flink.rest_models import (
    AggregatedMetric,
    BackPressure,
    CheckpointConfig,
    CheckpointDetail,
    CheckpointStats,
    CheckpointTrigger,
    ClusterOverview,
    JobDetail,
    JobSummary,
    ParallelismBounds,
    ResourceRequirement,
    SavepointTrigger,
    VertexDetail,
)
from kubesage.core.errors import InputError
from kubesage.core.field_errors import first_problem

log = logging.getLogger(__name__)

Model = TypeVar("Model", bound=BaseModel)


def check_rest_url(url: str, option: str = "--jobmanager") -> str:
    """``url`` when it is an http(s) URL with a host, as the REST client needs; else an
    InputError naming ``option`` (a malformed URL is not a JobManager that is down)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError(f"{option} must be an http(s) URL like http://host:8081, got '{url}'")
    return url


def rest_url_key(url: str) -> str:
    """``url`` as one JobManager: scheme and host in lower case, the port spelled out (80
    or 443 when absent, as the REST client connects), no trailing slash; so
    ``http://JM:80/`` and ``http://jm`` are the same cluster (another name for the same
    host is not recognised)."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
    host = (parts.hostname or "").lower()
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme.lower()}://{host}:{port}{parts.path.rstrip('/')}"


class _TransientError(Exception):
    """A failure worth retrying (connection, timeout, 5xx); becomes FlinkUnavailable.

    ``unsent``: the request never reached Flink (it could not connect), so sending it
    again cannot make Flink act twice."""

    def __init__(self, message: str, *, unsent: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.unsent = unsent


_UNSENT = (httpx.ConnectError, httpx.ConnectTimeout)
"""Transport errors raised before any byte of the request reached the server."""

_ACTS_ONCE = frozenset({"POST"})
"""Methods whose request Flink acts on each time it arrives (a checkpoint, a stop with
savepoint): retried only when the request was never sent. PUT resource requirements and
PATCH cancel set a state, so a repeat changes nothing."""


class FlinkClient:
    """Talks to one Flink JobManager; use as a context manager or call ``close()``."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 5.0,
        attempts: int = 4,
        backoff_s: float = 0.25,
        max_backoff_s: float = 4.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if attempts < 1:
            raise ValueError(f"attempts must be ≥ 1, got {attempts}")
        self.base_url = base_url.rstrip("/")
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout_s, transport=transport)
        self.retries = 0
        """Retried requests so far (connection errors and 5xx), for logs and metrics."""

    # -- plumbing ---------------------------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
    ) -> Any:
        """The decoded JSON of a successful reply (``None`` for an empty body)."""
        once = method in _ACTS_ONCE

        def replayable(exc: BaseException) -> bool:
            return isinstance(exc, _TransientError) and (exc.unsent or not once)

        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.attempts),
            wait=tenacity.wait_exponential(multiplier=self.backoff_s, max=self.max_backoff_s),
            retry=tenacity.retry_if_exception(replayable),
            before_sleep=self._count_retry,
            reraise=True,
        )
        try:
            reply = retrying(self._send, method, path, params, body)
        except _TransientError as exc:
            if once and not exc.unsent:
                raise FlinkUnavailable(
                    f"{exc.message}; not sent again, since Flink may have acted on it "
                    "(look at the job before asking again)",
                    endpoint=path,
                ) from exc
            raise FlinkUnavailable(
                f"{exc.message} (after {self.attempts} attempts)", endpoint=path
            ) from exc
        if reply.status_code == 404:
            raise FlinkNotFound(_error_text(reply), endpoint=path)
        if reply.status_code >= 400:
            raise FlinkResponseError(
                f"HTTP {reply.status_code}: {_error_text(reply)}", endpoint=path
            )
        if not reply.content:
            return None
        try:
            return reply.json()
        except ValueError as exc:
            raise FlinkResponseError(
                f"the body is not JSON: {reply.text[:200]!r}", endpoint=path
            ) from exc

    def _send(
        self, method: str, path: str, params: Mapping[str, str] | None, body: Any
    ) -> httpx.Response:
        try:
            reply = self._http.request(method, path, params=params, json=body)
        except httpx.TransportError as exc:
            unsent = isinstance(exc, _UNSENT)
            raise _TransientError(f"{type(exc).__name__}: {exc}", unsent=unsent) from exc
        if reply.status_code >= 500:
            raise _TransientError(f"HTTP {reply.status_code}: {_error_text(reply)}")
        return reply

    def _count_retry(self, state: tenacity.RetryCallState) -> None:
        self.retries += 1
        outcome = state.outcome.exception() if state.outcome else None
        log.info("Flink REST retry %d: %s", state.attempt_number, outcome)

    def _get_model(
        self, model: type[Model], path: str, params: Mapping[str, str] | None = None
    ) -> Model:
        return _validate(model, self._request("GET", path, params=params), path)

    # -- cluster and jobs ---------------------------------------------------------

    def overview(self) -> ClusterOverview:
        """Task managers and task slots (total, free)."""
        return self._get_model(ClusterOverview, "/overview")

    def jobs(self) -> list[JobSummary]:
        """Every job the JobManager knows, running or not."""
        path = "/jobs/overview"
        data = _require(self._request("GET", path), "jobs", path)
        return _validate_list(JobSummary, data, path, "jobs")

    def job(self, job_id: str) -> JobDetail:
        """State, vertices (parallelism, max parallelism) and plan edges of one job."""
        return self._get_model(JobDetail, f"/jobs/{job_id}")

    def vertex(self, job_id: str, vertex_id: str) -> VertexDetail:
        """One vertex's subtasks, each with its cumulative busy and backpressured time."""
        return self._get_model(VertexDetail, f"/jobs/{job_id}/vertices/{vertex_id}")

    def backpressure(self, job_id: str, vertex_id: str) -> BackPressure:
        return self._get_model(BackPressure, f"/jobs/{job_id}/vertices/{vertex_id}/backpressure")

    def metric_names(self, job_id: str, vertex_id: str) -> list[str]:
        """The metric ids a vertex's subtasks report (operator metrics are ``<op>.<name>``)."""
        path = f"/jobs/{job_id}/vertices/{vertex_id}/subtasks/metrics"
        data = self._request("GET", path)
        if not isinstance(data, list):
            raise FlinkResponseError("expected a list of metrics", endpoint=path)
        return [str(_require(entry, "id", path)) for entry in data]

    def subtask_metrics(
        self, job_id: str, vertex_id: str, names: Sequence[str]
    ) -> dict[str, AggregatedMetric]:
        """Metrics aggregated over a vertex's subtasks; ones Flink lacks are absent.

        Flink answers ``[]`` when any requested name is unknown, so an empty answer to
        several names is retried with only the names the vertex reports.
        """
        if not names:
            return {}
        path = f"/jobs/{job_id}/vertices/{vertex_id}/subtasks/metrics"
        data = self._request("GET", path, params={"get": ",".join(names)})
        if data == [] and len(names) > 1:
            known = set(self.metric_names(job_id, vertex_id))
            present = [name for name in names if name in known]
            if not present:
                return {}
            data = self._request("GET", path, params={"get": ",".join(present)})
        metrics = _validate_list(AggregatedMetric, data, path, "")
        return {metric.id: metric for metric in metrics}

    # -- checkpoints --------------------------------------------------------------

    def checkpoints(self, job_id: str) -> CheckpointStats:
        return self._get_model(CheckpointStats, f"/jobs/{job_id}/checkpoints")

    def checkpoint_details(self, job_id: str, checkpoint_id: int) -> CheckpointDetail:
        """One checkpoint's statistics, with the state each vertex holds (``tasks``)."""
        path = f"/jobs/{job_id}/checkpoints/details/{checkpoint_id}"
        return self._get_model(CheckpointDetail, path)

    def checkpoint_config(self, job_id: str) -> CheckpointConfig:
        return self._get_model(CheckpointConfig, f"/jobs/{job_id}/checkpoints/config")

    def trigger_checkpoint(self, job_id: str) -> str:
        """Asks for a checkpoint now; the request id to poll."""
        path = f"/jobs/{job_id}/checkpoints"
        return str(_require(self._request("POST", path, body={}), "request-id", path))

    def checkpoint_trigger_status(self, job_id: str, request_id: str) -> CheckpointTrigger:
        path = f"/jobs/{job_id}/checkpoints/{request_id}"
        try:
            return CheckpointTrigger.from_reply(self._operation_status(path))
        except ValidationError as exc:
            raise _response_error(exc, path) from exc

    # -- savepoints ----------------------------------------------------------------

    def stop_with_savepoint(self, job_id: str, target_directory: str | None) -> str:
        """Stops the job with a canonical savepoint (no drain); the request id to poll.

        ``target_directory`` None: Flink's ``execution.checkpointing.savepoint-dir``.
        """
        path = f"/jobs/{job_id}/stop"
        body: dict[str, Any] = {"drain": False, "formatType": "CANONICAL"}
        if target_directory:
            body["targetDirectory"] = target_directory
        return str(_require(self._request("POST", path, body=body), "request-id", path))

    def savepoint_status(self, job_id: str, request_id: str) -> SavepointTrigger:
        path = f"/jobs/{job_id}/savepoints/{request_id}"
        try:
            return SavepointTrigger.from_reply(self._operation_status(path))
        except ValidationError as exc:
            raise _response_error(exc, path) from exc

    def _operation_status(self, path: str) -> dict[str, Any]:
        """The reply to a poll of an asynchronous operation (``{"status": …, …}``)."""
        data = self._request("GET", path)
        if not isinstance(data, dict):
            raise FlinkResponseError("expected an object", endpoint=path)
        _require(data, "status", path)
        return data

    # -- rescaling ----------------------------------------------------------------

    def resource_requirements(self, job_id: str) -> dict[str, ParallelismBounds]:
        """Per vertex: the parallelism bounds the adaptive scheduler works within."""
        path = f"/jobs/{job_id}/resource-requirements"
        data = self._request("GET", path)
        if not isinstance(data, dict):
            raise FlinkResponseError("expected an object keyed by vertex id", endpoint=path)
        requirements: dict[str, ParallelismBounds] = {}
        for vertex_id, entry in data.items():
            requirement = _validate(ResourceRequirement, entry, path, prefix=vertex_id)
            requirements[vertex_id] = requirement.parallelism
        return requirements

    def set_resource_requirements(
        self, job_id: str, requirements: Mapping[str, ParallelismBounds]
    ) -> None:
        """Replaces the bounds (all vertices); the adaptive scheduler rescales to them."""
        body = {
            vertex_id: {"parallelism": bounds.model_dump(by_alias=True)}
            for vertex_id, bounds in requirements.items()
        }
        self._request("PUT", f"/jobs/{job_id}/resource-requirements", body=body)

    def cancel(self, job_id: str) -> None:
        """Cancels a job (``PATCH /jobs/<id>?mode=cancel``); returns once Flink accepted it."""
        self._request("PATCH", f"/jobs/{job_id}", params={"mode": "cancel"})

    # -- lifecycle ----------------------------------------------------------------

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> FlinkClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def _error_text(reply: httpx.Response) -> str:
    """Flink's ``{"errors": [...]}`` joined, else the start of the body."""
    try:
        data = reply.json()
    except ValueError:
        return reply.text[:200] or reply.reason_phrase
    if isinstance(data, dict) and isinstance(data.get("errors"), list):
        first_lines = [str(e).strip().splitlines()[0] for e in data["errors"] if str(e).strip()]
        return "; ".join(first_lines) or reply.reason_phrase
    return reply.text[:200]


def _require(data: Any, key: str, path: str) -> Any:
    if not isinstance(data, dict):
        raise FlinkResponseError("expected a JSON object", endpoint=path, field=key)
    if key not in data:
        raise FlinkResponseError("missing", endpoint=path, field=key)
    return data[key]


def _response_error(exc: ValidationError, path: str, prefix: str = "") -> FlinkError:
    """The first invalid field of a reply, in the project's wording (``field_errors``)."""
    problem = first_problem(exc, prefix)
    return FlinkResponseError(problem.message, endpoint=path, field=problem.field or None)


def _validate(model: type[Model], data: Any, path: str, prefix: str = "") -> Model:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _response_error(exc, path, prefix) from exc


def _validate_list(model: type[Model], data: Any, path: str, field: str) -> list[Model]:
    if not isinstance(data, list):
        raise FlinkResponseError("expected a list", endpoint=path, field=field or None)
    prefix = f"{field}." if field else ""
    return [_validate(model, entry, path, f"{prefix}{index}") for index, entry in enumerate(data)]
