"""The world model: what the loop believes about the cluster, updated every tick.

It is fed the tick's snapshots and keeps:

- the **cluster state** (a ClusterState, copied from the snapshot of the collector that
  yields one — the Kubernetes collector, the embedded cluster, the simulator) and the
  **pods** when that collector also lists them (:class:`ClusterObservation`);
- the **DRTG**, when configured: the link and device samples a snapshot carries
  (:class:`TopologySamples`) go to :meth:`DRTG.observe`, which keeps them over its
  sliding window;
  A per-node metric table (Prometheus through the metric map) with node-exporter's
  network columns (:data:`NODE_TRAFFIC_COLUMNS`) becomes observed traffic on each
  node's NIC uplinks (the busier direction, split evenly over its NICs), so the link
  availability gang placement reads follows what the nodes send;
- the **forecast panel** (:mod:`~kubesage.core.loop.forecasts`): every metric sample
  found (a per-node table as the Prometheus collector returns, or any data listing its
  samples) joins the rolling history.

Data is recognised by shape, never by the collector's type, so the loop imports neither
the Kubernetes layer nor the telemetry sources. Samples of a stale snapshot (the last
good one repeated) are not fed twice.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from kubesage.core.loop.forecasts import ForecastPanel, MetricSamples, MetricTable
from kubesage.core.loop.view import PodInfo, WorldView
from kubesage.core.perception import Snapshot
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.topology.graph import DRTG
from kubesage.core.topology.indicators import Indicator

log = logging.getLogger(__name__)


NODE_TRAFFIC_COLUMNS = (
    "node_exporter.network_transmit_bytes_per_s",
    "node_exporter.network_receive_bytes_per_s",
)
"""The metric map's per-node network columns (bytes/s) that feed the DRTG's NIC traffic."""


@dataclass(frozen=True)
class ClusterObservation:
    """A cluster state together with the pods it accounts (and those still pending)."""

    state: ClusterState
    pods: Mapping[str, PodInfo] = field(default_factory=dict)
    """By ``namespace/name``."""


@dataclass(frozen=True)
class LinkSample:
    """Samples of one dynamic DRTG indicator on some edges (global edge ids)."""

    edges: npt.ArrayLike
    indicator: Indicator
    values: npt.ArrayLike


@runtime_checkable
class TopologySamples(Protocol):
    """Snapshot data that carries link or device samples for the DRTG."""

    def link_samples(self) -> Iterable[LinkSample]: ...


def node_traffic(table: MetricTable, drtg: DRTG) -> list[LinkSample]:
    """Observed traffic (GB/s) on the NIC uplinks of the table's nodes that ``drtg``
    knows, from node-exporter's network columns; none when the table lacks them."""
    columns = [table.columns.index(c) for c in NODE_TRAFFIC_COLUMNS if c in table.columns]
    if not columns:
        return []
    samples = []
    for row, name in enumerate(table.nodes):
        node = drtg.node_index.get(name)
        values = np.asarray(table.values[row, columns], dtype=np.float64)
        if node is None or not np.isfinite(values).any():
            continue
        edges = drtg.nic_uplink_edges(node)
        if edges.size:
            busier = float(np.nanmax(values)) / 1e9 / edges.size
            samples.append(LinkSample(edges, Indicator.TRAFFIC_GBPS, busier))
    return samples


class WorldModel:
    """Cluster state, pods, topology and forecasts, as of the last :meth:`update`."""

    def __init__(
        self,
        *,
        topology: DRTG | None = None,
        forecasts: ForecastPanel | None = None,
    ) -> None:
        self.state: ClusterState | None = None
        self.state_source: str | None = None
        """The collector whose snapshot carried the cluster state."""
        self.pods: dict[str, PodInfo] = {}
        self.topology = topology
        self.forecasts = forecasts if forecasts is not None else ForecastPanel()
        self.link_samples = 0
        """How many link samples went to the DRTG (for tests and /debug)."""
        self._fed: dict[str, float] = {}
        """Collector → taken_at of the last snapshot whose samples were fed."""

    @property
    def ready(self) -> bool:
        """True once a cluster state was seen (reconcilers run only then)."""
        return self.state is not None

    def update(self, snapshots: Mapping[str, Snapshot[Any]]) -> None:
        """Take in one tick's snapshots (by collector name)."""
        for name, snapshot in snapshots.items():
            data = snapshot.data
            if isinstance(data, ClusterObservation):
                self.state, self.state_source = data.state, name
                self.pods = dict(data.pods)
            elif isinstance(data, ClusterState):
                self.state, self.state_source = data, name
            if self._fed.get(name) == snapshot.taken_at:
                continue  # the same samples again (a stale repeat): fed already
            self._fed[name] = snapshot.taken_at
            try:
                self._feed_samples(data, snapshot.taken_at)
            except Exception:  # bad samples from one source must not stop the tick
                log.exception("samples of collector %s could not be used", name)
        try:
            self.forecasts.refresh()
        except Exception:  # a broken forecaster: the last values stand this tick
            log.exception("forecaster %s failed", self.forecasts.source)

    def _feed_samples(self, data: Any, taken_at: float) -> None:
        if self.topology is not None and isinstance(data, TopologySamples):
            for sample in data.link_samples():
                self.topology.observe(sample.edges, sample.indicator, sample.values, taken_at)
                self.link_samples += 1
        if isinstance(data, MetricSamples):
            for entity, metric, value in data.metric_samples():
                self.forecasts.observe(entity, metric, value)
        elif isinstance(data, MetricTable):
            self.forecasts.observe_table(data)
            if self.topology is not None:
                for sample in node_traffic(data, self.topology):
                    self.topology.observe(sample.edges, sample.indicator, sample.values, taken_at)
                    self.link_samples += 1

    def view(
        self,
        *,
        tick: int,
        now_s: float,
        snapshots: Mapping[str, Snapshot[Any]],
        data_age_s: float,
        memory: Mapping[str, Any],
        refused: Mapping[str, float] | None = None,
    ) -> WorldView:
        """A view for one reconciler: its own copy of the state, and its memory."""
        if self.state is None:
            raise RuntimeError("no cluster state yet: check WorldModel.ready first")
        return WorldView(
            tick=tick,
            now_s=now_s,
            state=self.state.copy(),
            pods=dict(self.pods),
            topology=self.topology,
            forecasts=self.forecasts,
            snapshots=dict(snapshots),
            data_age_s=data_age_s,
            memory=dict(memory),
            refused=dict(refused or {}),
        )
