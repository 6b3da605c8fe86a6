"""Pydantic models of the Flink REST replies the adapter reads (Flink 1.18 – 2.3).

Fields carry Flink's own names as aliases (``slots-total``, ``maxParallelism``,
``backpressureLevel``…), so a model validates a reply as Flink sends it; Python code
uses the snake_case names. Unknown fields are ignored (Flink adds fields between
versions); a missing required field is a validation error that the client turns into
a :class:`~kubesage.adapters.flink.errors.FlinkResponseError` naming the endpoint and
the field. Times are Flink's epoch milliseconds (``_ms``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class FlinkModel(BaseModel):
    """Base: Flink's names as aliases, extra fields ignored, immutable."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)


class ClusterOverview(FlinkModel):
    """``GET /overview``."""

    taskmanagers: int
    slots_total: int = Field(alias="slots-total")
    slots_available: int = Field(alias="slots-available")
    jobs_running: int = Field(0, alias="jobs-running")
    flink_version: str = Field("", alias="flink-version")


class JobSummary(FlinkModel):
    """One job of ``GET /jobs/overview``."""

    job_id: str = Field(alias="jid")
    name: str = ""
    state: str
    start_time_ms: int = Field(-1, alias="start-time")


class JobVertex(FlinkModel):
    """A vertex (a chain of operators) of ``GET /jobs/<id>``."""

    id: str
    name: str
    parallelism: int
    max_parallelism: int = Field(alias="maxParallelism")
    status: str = ""
    slot_sharing_group: str = Field("default", alias="slotSharingGroupId")
    start_time_ms: int = Field(-1, alias="start-time")
    tasks: dict[str, int] = Field(default_factory=dict)


class PlanInput(FlinkModel):
    """An edge into a plan node: the upstream vertex and how records are shipped."""

    id: str
    num: int = 0
    ship_strategy: str = ""


class PlanNode(FlinkModel):
    id: str
    parallelism: int = 0
    description: str = ""
    inputs: tuple[PlanInput, ...] = ()


class JobPlan(FlinkModel):
    nodes: tuple[PlanNode, ...]


class JobDetail(FlinkModel):
    """``GET /jobs/<id>``: state, vertices and the plan's edges."""

    job_id: str = Field(alias="jid")
    name: str = ""
    state: str
    start_time_ms: int = Field(alias="start-time")
    now_ms: int = Field(0, alias="now")
    timestamps: dict[str, int] = Field(default_factory=dict)
    vertices: tuple[JobVertex, ...]
    plan: JobPlan

    @property
    def running_since_ms(self) -> int:
        """When the job last entered RUNNING (a restart or rescale resets it); 0 if never."""
        return self.timestamps.get("RUNNING", 0)

    def vertex(self, vertex_id: str) -> JobVertex:
        for vertex in self.vertices:
            if vertex.id == vertex_id:
                return vertex
        raise KeyError(vertex_id)

    def inputs(self) -> dict[str, tuple[PlanInput, ...]]:
        """Upstream edges of every vertex (sources have none)."""
        edges = {node.id: node.inputs for node in self.plan.nodes}
        return {vertex.id: edges.get(vertex.id, ()) for vertex in self.vertices}

    def topological_order(self) -> list[str]:
        """Vertex ids, every vertex after all its inputs (Kahn's algorithm, stable)."""
        inputs = self.inputs()
        order: list[str] = []
        placed: set[str] = set()
        remaining = [vertex.id for vertex in self.vertices]
        while remaining:
            ready = [v for v in remaining if all(e.id in placed for e in inputs[v])]
            if not ready:  # a cycle (iterations) or an edge to an unknown vertex
                ready = remaining[:1]
            for vertex_id in ready:
                order.append(vertex_id)
                placed.add(vertex_id)
            remaining = [v for v in remaining if v not in placed]
        return order


BackPressureLevel = Literal["ok", "low", "high"]


class SubtaskBackPressure(FlinkModel):
    subtask: int
    level: BackPressureLevel = Field(alias="backpressureLevel")
    ratio: float = 0.0
    busy_ratio: float = Field(0.0, alias="busyRatio")
    idle_ratio: float = Field(0.0, alias="idleRatio")


class BackPressure(FlinkModel):
    """``GET …/vertices/<vid>/backpressure``; ``status`` is ``deprecated`` until sampled."""

    status: str
    level: BackPressureLevel = Field("ok", alias="backpressureLevel")
    subtasks: tuple[SubtaskBackPressure, ...] = ()


class SubtaskTimes(FlinkModel):
    """A subtask's cumulative times (its ``metrics`` in ``GET /jobs/<id>/vertices/<vid>``):
    Flink's ``accumulateBusyTimeMs`` and ``accumulateBackPressuredTimeMs`` of that
    subtask, in ms; NaN where Flink does not measure it (it sends ``"NaN"``)."""

    busy_ms: float = Field(float("nan"), alias="accumulated-busy-time")
    backpressured_ms: float = Field(float("nan"), alias="accumulated-backpressured-time")
    idle_ms: float = Field(float("nan"), alias="accumulated-idle-time")

    @property
    def accounted_ms(self) -> float:
        """Busy + idle + backpressured: the subtask's running time as of the metric
        store's last refresh (NaN where Flink does not split a subtask's time: a
        legacy source)."""
        return self.busy_ms + self.idle_ms + self.backpressured_ms


class VertexSubtask(FlinkModel):
    subtask: int
    status: str = ""
    metrics: SubtaskTimes = Field(default_factory=SubtaskTimes)


class VertexDetail(FlinkModel):
    """``GET /jobs/<id>/vertices/<vid>``: the vertex's subtasks, each with its own
    cumulative times (where ``…/subtasks/metrics`` gives only aggregates over them)."""

    id: str
    parallelism: int = 0
    subtasks: tuple[VertexSubtask, ...] = ()


class AggregatedMetric(FlinkModel):
    """One entry of ``GET …/subtasks/metrics?get=…``: the metric over all subtasks."""

    id: str
    min: float
    max: float
    avg: float
    sum: float


class CheckpointCounts(FlinkModel):
    restored: int = 0
    total: int = 0
    in_progress: int = 0
    completed: int = 0
    failed: int = 0


class CheckpointEntry(FlinkModel):
    """A checkpoint in ``history`` or ``latest``; failed ones carry ``failure_message``."""

    id: int
    status: str
    is_savepoint: bool = False
    trigger_timestamp_ms: int = Field(alias="trigger_timestamp")
    latest_ack_timestamp_ms: int = Field(-1, alias="latest_ack_timestamp")
    state_size_bytes: int = Field(0, alias="state_size")
    checkpointed_size_bytes: int = Field(0, alias="checkpointed_size")
    end_to_end_duration_ms: int = Field(0, alias="end_to_end_duration")
    num_subtasks: int = 0
    num_acknowledged_subtasks: int = 0
    checkpoint_type: str = ""
    failure_message: str | None = None


class LatestCheckpoints(FlinkModel):
    completed: CheckpointEntry | None = None
    savepoint: CheckpointEntry | None = None
    failed: CheckpointEntry | None = None


class CheckpointStats(FlinkModel):
    """``GET /jobs/<id>/checkpoints``."""

    counts: CheckpointCounts
    latest: LatestCheckpoints = Field(default_factory=LatestCheckpoints)
    history: tuple[CheckpointEntry, ...] = ()


class TaskCheckpointState(FlinkModel):
    """One vertex's entry in a checkpoint's ``tasks``: the state its subtasks hold."""

    state_size_bytes: int = Field(0, alias="state_size")
    num_subtasks: int = 0


class CheckpointDetail(FlinkModel):
    """``GET /jobs/<id>/checkpoints/details/<checkpoint id>``: ``tasks`` per vertex id."""

    id: int
    status: str
    state_size_bytes: int = Field(0, alias="state_size")
    tasks: dict[str, TaskCheckpointState] = Field(default_factory=dict)


class CheckpointConfig(FlinkModel):
    """``GET /jobs/<id>/checkpoints/config`` (404 when checkpointing is off)."""

    mode: str = ""
    interval_ms: int = Field(alias="interval")
    timeout_ms: int = Field(alias="timeout")
    min_pause_ms: int = Field(0, alias="min_pause")
    max_concurrent: int = 1
    unaligned: bool = Field(False, alias="unaligned_checkpoints")
    aligned_checkpoint_timeout_ms: int = Field(0, alias="aligned_checkpoint_timeout")
    tolerable_failed_checkpoints: int = 0
    state_backend: str = ""
    checkpoint_storage: str = ""


class ParallelismBounds(FlinkModel):
    """A vertex's entry in ``/jobs/<id>/resource-requirements``."""

    lower: int = Field(alias="lowerBound")
    upper: int = Field(alias="upperBound")

    @field_validator("upper")
    @classmethod
    def _upper_at_least_one(cls, value: int) -> int:
        if value < 1:
            raise ValueError(f"upperBound must be ≥ 1, got {value}")
        return value


class ResourceRequirement(FlinkModel):
    parallelism: ParallelismBounds


class CheckpointTrigger(FlinkModel):
    """The state of a ``POST /jobs/<id>/checkpoints`` request.

    A trigger that failed also reports ``COMPLETED``, with a failure cause and no
    checkpoint id: check ``succeeded``, not ``status``.
    """

    status: Literal["IN_PROGRESS", "COMPLETED"]
    checkpoint_id: int | None = None
    failure_cause: str | None = None

    @property
    def succeeded(self) -> bool:
        return self.status == "COMPLETED" and self.checkpoint_id is not None

    @classmethod
    def from_reply(cls, reply: dict[str, Any]) -> CheckpointTrigger:
        """From Flink's ``{"status": {"id": …}, "operation": {…}}``."""
        status = reply.get("status")
        status_id = status.get("id") if isinstance(status, dict) else None
        operation = reply.get("operation") or {}
        if not isinstance(operation, dict):
            operation = {}
        cause = operation.get("failureCause", operation.get("failure-cause"))
        return cls.model_validate(
            {
                "status": status_id,
                "checkpoint_id": operation.get("checkpointId"),
                "failure_cause": _describe_cause(cause),
            }
        )


def _describe_cause(cause: Any) -> str | None:
    """Flink serialises a failure cause as an object with a class and a stack trace."""
    if cause is None:
        return None
    if isinstance(cause, dict):
        for key in ("stack-trace", "message", "class"):
            text = cause.get(key)
            if isinstance(text, str) and text:
                return text.strip().splitlines()[0]
        return str(cause)
    return str(cause).strip().splitlines()[0] if str(cause).strip() else None


class SavepointTrigger(FlinkModel):
    """The state of a ``POST /jobs/<id>/stop`` (or ``/savepoints``) request.

    Completed: ``location`` is the savepoint's path, or ``failure_cause`` says why none was
    written (a failed trigger reports ``COMPLETED`` too: check ``succeeded``).
    """

    status: Literal["IN_PROGRESS", "COMPLETED"]
    location: str | None = None
    failure_cause: str | None = None

    @property
    def succeeded(self) -> bool:
        return self.status == "COMPLETED" and bool(self.location)

    @classmethod
    def from_reply(cls, reply: dict[str, Any]) -> SavepointTrigger:
        """From Flink's ``{"status": {"id": …}, "operation": {"location": …}}``."""
        status = reply.get("status")
        operation = reply.get("operation") or {}
        if not isinstance(operation, dict):
            operation = {}
        cause = operation.get("failure-cause", operation.get("failureCause"))
        return cls.model_validate(
            {
                "status": status.get("id") if isinstance(status, dict) else None,
                "location": operation.get("location"),
                "failure_cause": _describe_cause(cause),
            }
        )
