"""kubesage's own Prometheus metrics, in one registry that ``/metrics`` serves.

Every component imports its counters from here (the extender, the webhook, the
secondary scheduler, the collectors), so one scrape shows the whole process.
Label values are small fixed sets (verbs, outcomes, component names), never pod
or node names, to keep the series count bounded.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

REGISTRY = CollectorRegistry(auto_describe=True)
"""The registry ``/metrics`` exposes (not the process-global default one)."""

LATENCY_BUCKETS_S = (
    0.0005,
    0.001,
    0.002,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
)
"""Histogram buckets in seconds: sub-millisecond to the webhook's time budget and beyond."""

DECISIONS = Counter(
    "kubesage_decisions_total",
    "Scheduling decisions by verb (filter, prioritize, bind, mutate, schedule) and outcome.",
    ["verb", "outcome"],
    registry=REGISTRY,
)
LATENCY = Histogram(
    "kubesage_request_duration_seconds",
    "Time to answer one request, by handler (filter, prioritize, bind, mutate...).",
    ["handler"],
    buckets=LATENCY_BUCKETS_S,
    registry=REGISTRY,
)
FALLBACKS = Counter(
    "kubesage_fallbacks_total",
    "Times a component degraded to its documented fallback, by component and reason.",
    ["component", "reason"],
    registry=REGISTRY,
)
ERRORS = Counter(
    "kubesage_errors_total",
    "Requests answered with an error, by component and kind (bad_request, internal...).",
    ["component", "kind"],
    registry=REGISTRY,
)
HTTP_CLOSED = Counter(
    "kubesage_http_connections_closed_total",
    "Connections the HTTP server closed on its own, by reason: a limit (url_too_long 414, "
    "header_too_large and too_many_headers 431, body_too_large 413), a timeout "
    "(header_timeout and body_timeout 408; idle_timeout and write_timeout, unanswered) or "
    "malformed HTTP (400).",
    ["reason"],
    registry=REGISTRY,
)
BINDS = Counter(
    "kubesage_binds_total",
    "Pod bindings attempted, by outcome (bound, failed).",
    ["outcome"],
    registry=REGISTRY,
)
COLLECTOR_FAILURES = Counter(
    "kubesage_collector_failures_total",
    "Collections that failed and fell back to the last good snapshot, by collector.",
    ["collector"],
    registry=REGISTRY,
)
CLUSTER_NODES = Gauge(
    "kubesage_cluster_nodes",
    "Nodes in the cluster state the decisions are made on.",
    registry=REGISTRY,
)


LOOP_TICKS = Counter(
    "kubesage_loop_ticks_total",
    "Control-loop ticks run (perceive, update, reconcile, act).",
    registry=REGISTRY,
)
LOOP_TICK_SECONDS = Histogram(
    "kubesage_loop_tick_seconds",
    "Time one control-loop tick took.",
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
    registry=REGISTRY,
)
LOOP_ACTIONS = Counter(
    "kubesage_loop_actions_total",
    "Actions the control loop considered, by reconciler, action kind and outcome.",
    ["reconciler", "action", "outcome"],
    registry=REGISTRY,
)
LOOP_STALE_TICKS = Counter(
    "kubesage_loop_stale_ticks_total",
    "Ticks whose data was older than allowed, so the loop acted on nothing.",
    registry=REGISTRY,
)
LOOP_RECONCILER_ERRORS = Counter(
    "kubesage_loop_reconciler_errors_total",
    "Reconcilers that raised during a tick (logged and skipped), by reconciler.",
    ["reconciler"],
    registry=REGISTRY,
)
LOOP_COLLECTOR_ERRORS = Counter(
    "kubesage_loop_collector_errors_total",
    "Collectors that raised during a tick (no snapshot yet, so skipped), by collector.",
    ["collector"],
    registry=REGISTRY,
)
LEADER = Gauge(
    "kubesage_leader",
    "1 while this replica holds the leader-election Lease named by lease, else 0 "
    "(only replicas that campaign export it: serve --scheduler-name).",
    ["lease"],
    registry=REGISTRY,
)


def render() -> tuple[bytes, str]:
    """The registry in the Prometheus text format, and its content type."""
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
