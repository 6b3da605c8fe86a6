"""The metric map: which PromQL query feeds which per-node column.

``configs/metric-map.yaml`` names, per source (node-exporter, dcgm-exporter, an eBPF
exporter...), the label that identifies the node (with Prometheus-style relabel rules
to turn it into a node name), and per metric the PromQL query, its unit, the label
that enumerates devices (GPUs, NICs, disks) and how devices are reduced to per-node
values. Decoding is strict: an unknown key, a bad regex or a map wider than the
feature budget is a :class:`ConfigError` naming the file and the field.

Column naming (stable, used by the features and by saved PCA models): a metric gives
``<source>.<metric>`` when it has one aggregate and no per-device slots; otherwise one
column per aggregate, ``<source>.<metric>.<aggregate>``, followed by one per device
slot, ``<source>.<metric>.<device_label><i>`` for ``i < max_devices`` (the first
device label when there are several). Where that label is an index (``gpu``), slot
``i`` is device ``i`` — empty when it reports nothing — so readers may take it as
GPU ``i``; device names fill the slots in their natural order.

MIG: dcgm-exporter sends one series per GPU instance, all with the GPU's ``gpu`` label
and told apart by ``GPU_I_ID`` (``GPU_I_PROFILE`` names the profile). A metric whose
``device_label`` is the list ``[gpu, GPU_I_ID]`` keys its devices by both labels, so
every instance is a device of its own (summed by ``sum``; a GPU's instances share
its slot, combined by the metric's first aggregate);
a series without ``GPU_I_ID`` (a GPU not in MIG mode) is keyed by ``gpu`` alone.
Series that carry the same values of every device label are one device seen twice
(e.g. by two scrape jobs) and are averaged.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from kubesage.core.config import StrictModel, load_config
from kubesage.core.durations import parse_promql_duration, promql_duration_problem
from kubesage.core.errors import InputError
from kubesage.core.paths import shipped_file

KIND = "MetricMap"
SHIPPED_METRIC_MAP = "metric-map.yaml"
"""The shipped map, under ``configs/`` (:func:`~kubesage.core.paths.shipped_file`)."""
MAX_DIMENSIONS = 1024
"""The hard ceiling on raw feature dimensions per node (the design's budget)."""

WINDOW_PLACEHOLDER = "$window"
"""Written in a query where a range selector's duration goes: ``rate(x[$window])``."""
_PLACEHOLDER = re.compile(r"\$\{?[A-Za-z_]\w*\}?")
"""A ``$name`` (or ``${name}``) in a query: PromQL has none of its own (``$1`` in
``label_replace`` is a group reference, not a name)."""

Aggregate = Literal["mean", "max", "min", "sum"]
Stat = Literal["last", "mean", "max", "p95", "slope"]

_NAME = r"^[a-z][a-z0-9_]*$"
_GROUP_REFERENCE = re.compile(r"\$\{?(\d+)\}?")


class RelabelRule(StrictModel):
    """Prometheus ``replace`` relabelling of the node label's value.

    The regex is anchored at both ends, as in Prometheus; a value that does not
    match is left unchanged. ``$1``/``${1}`` in the replacement refer to groups.
    """

    regex: str
    replacement: str = "$1"

    @field_validator("regex")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from None
        return value

    @field_validator("replacement")
    @classmethod
    def _groups_exist(cls, value: str, info: ValidationInfo) -> str:
        regex = info.data.get("regex")
        if regex is None:  # the regex itself is wrong; that error is reported
            return value
        groups = re.compile(regex).groups
        for reference in _GROUP_REFERENCE.findall(value):
            if int(reference) > groups:
                raise ValueError(
                    f"{value!r} refers to group ${reference}, but the regex {regex!r} "
                    f"has {groups} group(s)"
                )
        return value

    def apply(self, value: str) -> str:
        match = re.fullmatch(self.regex, value)
        if match is None:
            return value
        template = _GROUP_REFERENCE.sub(r"\\g<\1>", self.replacement)
        return match.expand(template)


class NodeIdentity(StrictModel):
    """Which label of a series names its node, and how to rewrite it into a node name."""

    label: str = Field(min_length=1)
    relabel: tuple[RelabelRule, ...] = ()

    def node_of(self, value: str) -> str:
        for rule in self.relabel:
            value = rule.apply(value)
        return value


class MetricSpec(StrictModel):
    """One PromQL query and how its series become per-node columns."""

    query: str = Field(min_length=1)
    unit: str = Field(min_length=1)
    """Unit of the query's value (documentation; ``bytes_per_s``, ``fraction``...)."""
    description: str = ""
    device_label: str | tuple[str, ...] | None = None
    """Label(s) that tell a node's series apart (``gpu``, ``device``; ``[gpu, GPU_I_ID]``
    for MIG instances); none: one series."""
    aggregate: tuple[Aggregate, ...] = ("sum",)
    """How a node's series (its devices) reduce to per-node columns."""
    max_devices: int = Field(default=0, ge=0, le=64)
    """Per-device columns kept, padded or truncated in device order (0: aggregates only)."""
    impute: float = Field(default=0.0, allow_inf_nan=False)
    """Value written where a column has no sample; its ``:missing`` flag says so."""

    @field_validator("query")
    @classmethod
    def _known_placeholders(cls, query: str) -> str:
        unknown = sorted(set(_PLACEHOLDER.findall(query)) - {WINDOW_PLACEHOLDER}, key=query.index)
        if unknown:
            raise ValueError(
                f"unknown placeholder {unknown[0]}: only {WINDOW_PLACEHOLDER} is substituted "
                "(a Grafana variable such as $__rate_interval is not)"
            )
        return query

    @model_validator(mode="after")
    def _consistent(self) -> MetricSpec:
        if not self.aggregate:
            raise ValueError("aggregate needs at least one of mean, max, min, sum")
        if len(set(self.aggregate)) != len(self.aggregate):
            raise ValueError(f"aggregate repeats a reducer: {list(self.aggregate)}")
        if self.max_devices and self.device_label is None:
            raise ValueError("max_devices needs a device_label to order the devices by")
        labels = self.device_labels
        if self.device_label is not None and (
            not labels or not all(labels) or len(set(labels)) != len(labels)
        ):
            raise ValueError(f"device_label needs distinct, non-empty labels: {list(labels)}")
        return self

    @property
    def device_labels(self) -> tuple[str, ...]:
        """The labels that key a device, in order (empty: one series per node)."""
        if self.device_label is None:
            return ()
        return (self.device_label,) if isinstance(self.device_label, str) else self.device_label

    def columns(self, source: str, name: str) -> tuple[str, ...]:
        base = f"{source}.{name}"
        if len(self.aggregate) == 1 and not self.max_devices:
            return (base,)
        first = self.device_labels[0] if self.device_labels else ""
        slots = tuple(f"{base}.{first}{i}" for i in range(self.max_devices))
        return tuple(f"{base}.{agg}" for agg in self.aggregate) + slots


class SourceSpec(StrictModel):
    """One exporter family and the metrics read from it."""

    description: str = ""
    node: NodeIdentity
    metrics: dict[str, MetricSpec] = Field(min_length=1)

    @field_validator("metrics")
    @classmethod
    def _names(cls, value: dict[str, MetricSpec]) -> dict[str, MetricSpec]:
        for name in value:
            if not re.match(_NAME, name):
                raise ValueError(f"metric name {name!r} must match {_NAME}")
        return value


class MetricMapSpec(StrictModel):
    """The ``spec`` of a MetricMap document."""

    rate_window: str = "1m"
    """Substituted for ``$window`` in queries (a PromQL duration); cover at least two scrapes."""
    stats: tuple[Stat, ...] = ("last", "mean", "max", "p95", "slope")
    """Windowed statistics computed per column."""
    max_dimensions: int = Field(default=MAX_DIMENSIONS, ge=1, le=MAX_DIMENSIONS)
    sources: dict[str, SourceSpec] = Field(min_length=1)

    @field_validator("rate_window")
    @classmethod
    def _promql_duration(cls, value: str) -> str:
        problem = promql_duration_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("sources")
    @classmethod
    def _source_names(cls, value: dict[str, SourceSpec]) -> dict[str, SourceSpec]:
        for name in value:
            if not re.match(_NAME, name):
                raise ValueError(f"source name {name!r} must match {_NAME}")
        return value

    @model_validator(mode="after")
    def _fits_budget(self) -> MetricMapSpec:
        if not self.stats or len(set(self.stats)) != len(self.stats):
            raise ValueError(f"stats must be distinct and not empty: {list(self.stats)}")
        columns = sum(
            len(metric.columns(source, name))
            for source, spec in self.sources.items()
            for name, metric in spec.metrics.items()
        )
        dimensions = columns * (len(self.stats) + 1)  # + one missing flag per column
        if dimensions > self.max_dimensions:
            raise ValueError(
                f"{columns} columns × ({len(self.stats)} stats + missing flag) = "
                f"{dimensions} dimensions exceed max_dimensions {self.max_dimensions}"
            )
        return self


@dataclass(frozen=True, slots=True)
class MappedMetric:
    """A metric of the map, resolved: its source, query text and column names."""

    source: str
    name: str
    spec: MetricSpec
    node: NodeIdentity
    query: str
    columns: tuple[str, ...]


@dataclass(frozen=True)
class MetricMap:
    """A loaded, validated metric map and where it came from."""

    spec: MetricMapSpec
    path: Path | None = None

    @property
    def metrics(self) -> tuple[MappedMetric, ...]:
        resolved = []
        for source, source_spec in self.spec.sources.items():
            for name, metric in source_spec.metrics.items():
                resolved.append(
                    MappedMetric(
                        source=source,
                        name=name,
                        spec=metric,
                        node=source_spec.node,
                        query=metric.query.replace(WINDOW_PLACEHOLDER, self.spec.rate_window),
                        columns=metric.columns(source, name),
                    )
                )
        return tuple(resolved)

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(column for metric in self.metrics for column in metric.columns)

    def only(self, columns: Collection[str]) -> MetricMap:
        """The map reduced to the metrics that give any of ``columns`` (a source left
        without metrics is dropped): a reader that needs a few columns queries only those
        metrics."""
        wanted = set(columns)
        sources = {}
        for source, spec in self.spec.sources.items():
            kept = {
                name: metric
                for name, metric in spec.metrics.items()
                if wanted & set(metric.columns(source, name))
            }
            if kept:
                sources[source] = spec.model_copy(update={"metrics": kept})
        if not sources:
            raise InputError(
                f"no metric of the map gives any of {', '.join(sorted(wanted)) or 'no columns'}"
            )
        return MetricMap(spec=self.spec.model_copy(update={"sources": sources}), path=self.path)

    def with_rate_window(self, rate_window: str) -> MetricMap:
        """The same map with another ``$window`` (a PromQL duration; else a DurationError)."""
        window = parse_promql_duration(rate_window, "rate window")
        return MetricMap(spec=self.spec.model_copy(update={"rate_window": window}), path=self.path)


def load_metric_map(path: Path | str | None = None) -> MetricMap:
    """Load and validate a MetricMap YAML (default: the shipped configs/metric-map.yaml)."""
    source = Path(path) if path is not None else shipped_file(SHIPPED_METRIC_MAP)
    return MetricMap(spec=load_config(source, MetricMapSpec, kind=KIND), path=source)
