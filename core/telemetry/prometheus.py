"""The Prometheus collector: metric-map queries → per-node columns, with a stale fallback.

:class:`PrometheusCollector` runs every query of the metric map through
prometheus-api-client's ``PrometheusConnect`` — ``custom_query`` at one instant for
:meth:`~PrometheusCollector.collect`, ``custom_query_range`` for
:meth:`~PrometheusCollector.history` (the data PCA is fitted on) — and reduces the
returned series to the map's columns: the node comes from the source's node label
after its relabel rules, devices are keyed by their device label(s) (``gpu``, or
``gpu`` and ``GPU_I_ID`` for MIG instances) and ordered by them (numbers
numerically), reduced by the map's aggregates and, up to ``max_devices``, kept as
per-device columns (padded with NaN, extra devices truncated). Series without the
source's node label cannot be placed: they are dropped, and ``dropped`` says, per
source, how many and which labels they had instead.

Fallback (the Collector protocol's): when Prometheus is unreachable, answers with an
error status (its ``errorType`` and ``error`` text in the reason) or with a body that
is not a Prometheus API response holding an instant/range vector, ``collect`` logs a
warning, counts the failure (``failures``, the process metric
``kubesage_collector_failures_total{collector="prometheus"}`` and an optional
``on_failure`` callback) and returns the last good snapshot marked ``stale`` with
the reason. Before any good snapshot there is nothing to fall back to: it raises
:class:`PrometheusUnavailableError` (a ``DependencyError``). A query that returns no
series is not a failure: its columns are NaN, and the features flag them as missing.
``history`` has no fallback; it raises :class:`PrometheusUnavailableError`. It splits
a long range into several queries, so that none exceeds Prometheus's 11,000 points per
series nor asks for more than ``max_samples_per_query`` samples (a first short query
counts the series; each later one is sized by the most series seen so far, and one that
Prometheus still refuses as too many samples, because series appeared, is asked again
in halves).
"""

from __future__ import annotations

import ast
import json
import logging
import math
import re
import time
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fractions import Fraction
from functools import partial
from typing import Any

import numpy as np
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from urllib3.util.retry import Retry

from kubesage.core.arrays import FloatArray
from kubesage.core.errors import DependencyError, InputError
from kubesage.core.observability.metrics import COLLECTOR_FAILURES
from kubesage.core.perception import Snapshot
from kubesage.core.telemetry.features import MetricHistory, NodeMetrics
from kubesage.core.telemetry.metric_map import MappedMetric, MetricMap

LOG = logging.getLogger(__name__)

Series = tuple[Mapping[str, str], FloatArray]
"""One returned series: its labels and its values on the query's time grid."""


MAX_POINTS_PER_SERIES = 11_000
"""Prometheus refuses a range query of more points than this per series."""
MAX_SAMPLES_PER_QUERY = 5_000_000
"""Samples one range query asks for at most: a tenth of Prometheus's default
``--query.max-samples`` (50 million), which a long history of a large cluster's per-GPU
series would exceed in one query."""
PROBE_POINTS = 60
"""Points of a history's first range query, before the series count is known."""
TOO_MANY_SAMPLES = "too many samples"
"""In Prometheus's refusal of a query over ``--query.max-samples`` ("query processing
would load too many samples into memory in query execution")."""


def chunk_points(step_s: float, wanted: int, total: int) -> int:
    """Points per range query: ``wanted`` clamped to [1, MAX_POINTS_PER_SERIES], rounded
    down to a multiple that keeps every query's start on a whole second (the client
    sends whole seconds); ``total`` (one query) when the step allows no such multiple."""
    whole = Fraction(step_s).limit_denominator(1000)
    if abs(float(whole) - step_s) > 1e-9:
        return total
    unit = whole.denominator  # unit × step_s is a whole number of seconds
    points = max(1, min(wanted, MAX_POINTS_PER_SERIES))
    return max(unit, points // unit * unit)


class PrometheusUnavailableError(DependencyError):
    """Prometheus could not answer (down, error status, malformed body)."""


QUERY_SHOWN = 80
"""Characters of a query that error messages show (the error text is shown whole)."""
_HTTP_STATUS = re.compile(r"HTTP Status Code (\d+) \((b?(?:'.*'|\".*\"))\)", re.DOTALL)


def _short(query: str) -> str:
    flat = " ".join(query.split())
    return repr(flat if len(flat) <= QUERY_SHOWN else flat[: QUERY_SHOWN - 3] + "...")


def http_error_text(url: str, message: str) -> str:
    """prometheus-api-client's ``HTTP Status Code 422 (b'{...}')`` as a reader wants it:
    ``HTTP 422 execution: <error>`` from the API's JSON body, the body decoded when it is
    not JSON, and a 404 said to be no Prometheus API at ``url``."""
    found = _HTTP_STATUS.search(message)
    if found is None:
        return message
    status = int(found.group(1))
    try:
        body = ast.literal_eval(found.group(2))
    except (ValueError, SyntaxError):
        body = found.group(2)
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body)
    if status == 404:
        return f"HTTP 404: no Prometheus API at {url} (is the URL the server's base URL?)"
    try:
        reply = json.loads(text)
    except ValueError:
        reply = None
    if isinstance(reply, dict) and reply.get("error"):
        kind = f" {reply['errorType']}" if reply.get("errorType") else ""
        return f"HTTP {status}{kind}: {reply['error']}"
    text = " ".join(text.split())
    return f"HTTP {status}: {text}" if text else f"HTTP {status} with an empty body"


@dataclass
class DroppedSeries:
    """Series of one source that had no node label, and the labels they had instead."""

    source: str
    label: str
    count: int = 0
    labels_seen: set[str] = field(default_factory=set)

    def describe(self) -> str:
        seen = ", ".join(sorted(self.labels_seen)) or "none"
        return (
            f"{self.source}: {self.count} series had no {self.label!r} label (labels seen: {seen})"
        )


def _natural(value: str) -> tuple[int, int, str]:
    """Order labels naturally: ``gpu="2"`` before ``gpu="10"``, names after numbers."""
    return (0, int(value), "") if value.isdecimal() else (1, 0, value)


def _device_key(device: tuple[str, ...]) -> tuple[tuple[int, int, str], ...]:
    """Order devices by each of their labels naturally (a missing ``GPU_I_ID`` last)."""
    return tuple(_natural(value) for value in device)


def reduce_series(
    metric: MappedMetric,
    series: Sequence[Series],
    steps: int,
    dropped: MutableMapping[str, DroppedSeries] | None = None,
) -> dict[str, FloatArray]:
    """Per node, the metric's columns over ``steps`` time steps: ``{node: [steps, columns]}``.

    A device is keyed by the values of all the metric's device labels (``gpu`` and
    ``GPU_I_ID``: each MIG instance apart). Series without the source's node label are
    dropped: they cannot be placed; they are logged and counted in ``dropped`` (per
    source) when given.
    """
    spec = metric.spec
    by_node: dict[str, dict[tuple[str, ...], FloatArray]] = {}
    lost = DroppedSeries(metric.source, metric.node.label)
    for labels, values in series:
        raw = labels.get(metric.node.label)
        if not raw:
            lost.count += 1
            lost.labels_seen.update(name for name in labels if name != "__name__")
            continue
        node = metric.node.node_of(raw)
        devices = by_node.setdefault(node, {})
        # Without a device label a metric is one value per node: its several series
        # there are that value seen several times (two scrape jobs), not several devices.
        device = tuple(labels.get(name, "") for name in spec.device_labels)
        if device in devices:  # one device seen twice (e.g. by two scrape jobs): average
            earlier = devices[device]
            both = np.isfinite(earlier) & np.isfinite(values)
            devices[device] = np.where(
                both, (earlier + values) / 2, np.where(np.isfinite(earlier), earlier, values)
            )
        else:
            devices[device] = values
    if lost.count:
        LOG.warning("%s (query %s): dropped", lost.describe(), _short(metric.query))
        if dropped is not None:
            total = dropped.setdefault(lost.source, DroppedSeries(lost.source, lost.label))
            total.count += lost.count
            total.labels_seen |= lost.labels_seen
    out = {}
    for node, devices in by_node.items():
        keys = sorted(devices, key=_device_key)
        stack = np.stack([devices[key] for key in keys])  # (devices, steps)
        reduced = [_aggregate(stack, aggregate) for aggregate in spec.aggregate]
        slots = np.full((spec.max_devices, steps), np.nan)
        for slot, rows in _slot_rows(keys, spec.max_devices).items():
            slots[slot] = _aggregate(stack[rows], spec.aggregate[0])
        if len(keys) > spec.max_devices > 0:
            LOG.debug(
                "%s on %s: %d devices, %d slots", metric.name, node, len(keys), spec.max_devices
            )
        out[node] = np.concatenate([np.stack(reduced), slots], axis=0).T
    return out


def _aggregate(stack: FloatArray, aggregate: str) -> FloatArray:
    """``stack``'s ``(devices, steps)`` reduced over devices by ``aggregate``, over the
    observed values only (NaN where no device was observed)."""
    observed = np.isfinite(stack)
    count = observed.sum(axis=0)
    if aggregate == "sum":
        value = np.where(observed, stack, 0.0).sum(axis=0)
    elif aggregate == "mean":
        value = np.where(observed, stack, 0.0).sum(axis=0) / np.maximum(count, 1)
    elif aggregate == "max":
        value = np.where(observed, stack, -np.inf).max(axis=0)
    else:
        value = np.where(observed, stack, np.inf).min(axis=0)
    result: FloatArray = np.where(count > 0, value, np.nan)
    return result


def _slot_rows(keys: Sequence[tuple[str, ...]], max_devices: int) -> dict[int, list[int]]:
    """Which devices (rows of the sorted ``keys``) fill each per-device slot.

    Where every device's first label is an index (dcgm-exporter's ``gpu``), slot ``i``
    is device ``i`` itself — a GPU that reports nothing leaves its slot empty instead of
    shifting the later GPUs into it — and a GPU's MIG instances (the same first label)
    share its slot, combined by the metric's first aggregate. Otherwise (names, not
    indices) the devices fill the slots in their natural order."""
    if keys and all(key and key[0].isdecimal() for key in keys):
        by_index: dict[int, list[int]] = {}
        for row, key in enumerate(keys):
            if int(key[0]) < max_devices:
                by_index.setdefault(int(key[0]), []).append(row)
        return by_index
    return {row: [row] for row in range(min(max_devices, len(keys)))}


def _labels(item: Any, where: str) -> Mapping[str, str]:
    if not isinstance(item, dict) or not isinstance(item.get("metric"), dict):
        raise PrometheusUnavailableError(f"{where}: result item is not a series: {str(item)[:120]}")
    return {str(k): str(v) for k, v in item["metric"].items()}


def _number(value: Any, where: str) -> float:
    try:
        return float(value)  # Prometheus sends "NaN", "+Inf" as strings; float() reads them
    except (TypeError, ValueError):
        raise PrometheusUnavailableError(
            f"{where}: sample value {value!r} is not a number"
        ) from None


class PrometheusCollector:
    """Reads the metric map's queries from one Prometheus server (Collector protocol)."""

    def __init__(
        self,
        url: str,
        metric_map: MetricMap,
        *,
        timeout_s: float = 5.0,
        attempts: int = 2,
        headers: Mapping[str, str] | None = None,
        on_failure: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.time,
        max_samples_per_query: int = MAX_SAMPLES_PER_QUERY,
    ) -> None:
        """``attempts`` bounds tries per query (connection errors and 502/503/504, short
        backoff); ``headers`` go with every request (``Authorization: Bearer …`` for a
        Prometheus behind a proxy); ``on_failure(reason)`` is called once per failed
        collection; ``max_samples_per_query`` (series × points) splits a long history
        into several range queries."""
        if attempts < 1:
            raise InputError(f"attempts must be at least 1, got {attempts}")
        if max_samples_per_query < 1:
            raise InputError(f"max_samples_per_query must be positive, got {max_samples_per_query}")
        self.url = url.rstrip("/")
        self.metric_map = metric_map
        self.max_samples_per_query = max_samples_per_query
        self._client = PrometheusConnect(
            url=self.url,
            headers=dict(headers) if headers else None,
            disable_ssl=False,
            timeout=timeout_s,
            retry=Retry(
                total=attempts - 1,
                backoff_factor=0.1,
                status_forcelist=(502, 503, 504),
                raise_on_status=False,
            ),
        )
        self._on_failure = on_failure
        self._clock = clock
        self._last_good: Snapshot[NodeMetrics] | None = None
        self._failures = 0
        self.last_error: str | None = None
        self.dropped: dict[str, DroppedSeries] = {}
        """Per source, the series the last collection or history dropped (no node label)."""

    @property
    def name(self) -> str:
        return "prometheus"

    @property
    def failures(self) -> int:
        return self._failures

    @property
    def columns(self) -> tuple[str, ...]:
        return self.metric_map.columns

    def close(self) -> None:
        self._client.close()

    def collect(self) -> Snapshot[NodeMetrics]:
        """Every map column per node now; the stale last good snapshot if Prometheus fails."""
        now = self._clock()
        dropped: dict[str, DroppedSeries] = {}
        try:
            per_metric = [
                reduce_series(metric, self._instant(metric.query, now), 1, dropped)
                for metric in self.metric_map.metrics
            ]
        except PrometheusUnavailableError as exc:
            return self._fallback(str(exc))
        snapshot = Snapshot(self._assemble(per_metric, steps=1, taken_at=now), taken_at=now)
        self.dropped = dropped
        self._last_good = snapshot
        self.last_error = None
        return snapshot

    def history(self, start_s: float, end_s: float, step_s: float) -> MetricHistory:
        """Every map column per node on the grid ``start_s, start_s + step_s, … ≤ end_s``
        (whole seconds, as prometheus-api-client sends them); a long range of many series
        is read in several range queries (``max_samples_per_query``)."""
        start, end = float(round(start_s)), float(round(end_s))
        if not (math.isfinite(step_s) and step_s > 0) or end < start:
            raise InputError(f"bad range: start {start_s}, end {end_s}, step {step_s}")
        steps = int((end - start) // step_s) + 1
        times = np.asarray(start + step_s * np.arange(steps), dtype=np.float64)
        per_metric = []
        dropped: dict[str, DroppedSeries] = {}
        for metric in self.metric_map.metrics:
            series = self._range(metric.query, step_s, times)
            per_metric.append(reduce_series(metric, series, steps, dropped))
        self.dropped = dropped
        nodes, values = self._stack(per_metric, steps)
        return MetricHistory(times, nodes, self.columns, values)

    # ------------------------------------------------------------------ internals

    def _fallback(self, reason: str) -> Snapshot[NodeMetrics]:
        self._failures += 1
        self.last_error = reason
        COLLECTOR_FAILURES.labels(collector=self.name).inc()
        if self._on_failure is not None:
            self._on_failure(reason)
        if self._last_good is None:
            LOG.error("prometheus collection failed with no earlier snapshot: %s", reason)
            raise PrometheusUnavailableError(f"{reason} (no earlier good snapshot to fall back to)")
        age = self._clock() - self._last_good.taken_at
        LOG.warning(
            "prometheus collection failed (%d so far); serving the snapshot from %.1f s ago: %s",
            self._failures,
            age,
            reason,
        )
        good = self._last_good
        return Snapshot(good.data, taken_at=good.taken_at, stale=True, reason=reason)

    def _call(self, query: str, fetch: Callable[[], Any]) -> list[Any]:
        try:
            result = fetch()
        except PrometheusApiClientException as exc:
            raise PrometheusUnavailableError(
                f"{self.url}: {http_error_text(self.url, str(exc))} (query {_short(query)})"
            ) from exc
        except json.JSONDecodeError as exc:  # answered, but not JSON (a proxy's page)
            # requests' JSONDecodeError is an OSError too: caught before the OSErrors.
            raise PrometheusUnavailableError(
                f"{self.url}: query {_short(query)}: the reply is not a Prometheus API "
                f"response (not JSON: {exc})"
            ) from exc
        except (OSError, ValueError) as exc:  # requests' errors are OSErrors
            raise PrometheusUnavailableError(
                f"{self.url}: unreachable ({type(exc).__name__}: {exc}; query {_short(query)})"
            ) from exc
        except (KeyError, TypeError, IndexError) as exc:  # the client reads body["data"]["result"]
            raise PrometheusUnavailableError(
                f"{self.url}: query {_short(query)}: the reply is not a Prometheus API "
                f"response (no data.result: {type(exc).__name__}: {exc})"
            ) from exc
        if not isinstance(result, list) or (result and not isinstance(result[0], dict)):
            raise PrometheusUnavailableError(
                f"{self.url}: query {_short(query)} did not return a vector"
            )
        return result

    def _instant(self, query: str, at_s: float) -> list[Series]:
        result = self._call(
            query, lambda: self._client.custom_query(query, params={"time": f"{at_s:.3f}"})
        )
        out = []
        for item in result:
            value = item.get("value")
            if not isinstance(value, list) or len(value) != 2:
                raise PrometheusUnavailableError(
                    f"{self.url}: query {_short(query)}: sample without value"
                )
            out.append((_labels(item, query), np.array([_number(value[1], query)])))
        return out

    def _range(self, query: str, step_s: float, times: FloatArray) -> list[Series]:
        """The query over ``times``, in as many range queries as Prometheus's limits need
        (see :func:`chunk_points`), each series stitched back by its labels."""
        merged: dict[tuple[tuple[str, str], ...], Series] = {}
        probe = min(PROBE_POINTS, self.max_samples_per_query)
        first, points = 0, chunk_points(step_s, probe, len(times))
        most_series = 1
        while first < len(times):
            last = min(first + points, len(times)) - 1
            fetch = partial(
                self._client.custom_query_range,
                query,
                start_time=datetime.fromtimestamp(float(times[first]), tz=UTC),
                end_time=datetime.fromtimestamp(float(times[last]), tz=UTC),
                step=f"{step_s:g}",
            )
            try:
                result = self._call(query, fetch)
            except PrometheusUnavailableError as exc:
                # More series appeared than the chunk was sized for (an exporter
                # deployed part-way through the range): Prometheus refuses the samples.
                # Halve the chunk and ask again, down to what one query must hold.
                smaller = chunk_points(step_s, points // 2, len(times))
                if TOO_MANY_SAMPLES not in str(exc) or smaller >= points:
                    raise
                LOG.info("%s: %d points refused as too many samples; %d", query, points, smaller)
                points = smaller
                continue
            for item in result:
                labels = _labels(item, query)
                key = tuple(sorted(labels.items()))
                if key not in merged:
                    merged[key] = (labels, np.full(len(times), np.nan))
                self._fill(merged[key][1], item, query, times, step_s)
            first = last + 1
            most_series = max(most_series, len(result))  # series seldom disappear for good
            points = chunk_points(step_s, self.max_samples_per_query // most_series, len(times))
        return list(merged.values())

    def _fill(
        self, values: FloatArray, item: dict[str, Any], query: str, times: FloatArray, step_s: float
    ) -> None:
        points = item.get("values")
        if not isinstance(points, list):
            raise PrometheusUnavailableError(
                f"{self.url}: query {_short(query)}: series without values"
            )
        for point in points:
            if not isinstance(point, list) or len(point) != 2:
                raise PrometheusUnavailableError(
                    f"{self.url}: query {_short(query)}: bad point {point!r}"
                )
            index = round((_number(point[0], query) - times[0]) / step_s)
            if 0 <= index < len(times):
                values[index] = _number(point[1], query)

    def _stack(
        self, per_metric: list[dict[str, FloatArray]], steps: int
    ) -> tuple[tuple[str, ...], FloatArray]:
        nodes = tuple(sorted({node for reduced in per_metric for node in reduced}))
        blocks = []
        for metric, reduced in zip(self.metric_map.metrics, per_metric, strict=True):
            block = np.full((steps, len(nodes), len(metric.columns)), np.nan)
            for n, node in enumerate(nodes):
                if node in reduced:
                    block[:, n, :] = reduced[node]
            blocks.append(block)
        values = np.concatenate(blocks, axis=2) if blocks else np.zeros((steps, len(nodes), 0))
        return nodes, values

    def _assemble(
        self, per_metric: list[dict[str, FloatArray]], *, steps: int, taken_at: float
    ) -> NodeMetrics:
        nodes, values = self._stack(per_metric, steps)
        return NodeMetrics(nodes, self.columns, values[0], taken_at)
