"""``benchmarks/extender.py --profile``: where a filter and a prioritize spend their time.

The same pods and candidate windows as the HTTP run, through the handlers in this
process (no HTTP, no control loop; filter's prescore run between filter and prioritize,
as the server runs it after filter's answer): each stage of the request path is timed
per call by wrapping the function that does it, and the table (p50 and mean microseconds
per call) goes to stderr. The stages are the extender's own helpers, so a stage that a
later version renames or merges is simply missing from the table; "other" is the
handler's time outside the named stages (JSON encoding of the answer, locks, metrics).
Timing wrappers add about a microsecond per stage.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from operator import itemgetter
from typing import Any

import numpy as np
import orjson

from kubesage.core.k8s import extender as handlers
from kubesage.core.k8s.embedded import EmbeddedCluster
from kubesage.core.policy import PolicyContext, make_policy

STAGES = {
    "filter": (
        ("parse_args", "JSON decode (orjson) + shape check"),
        ("_request", "pod -> PodRequest"),
        ("map_candidates", "names -> state indices"),
        ("filter_candidates", "fit + reasons"),
        ("passed_of", "memo for prioritize"),
    ),
    "prescore": (("score_nodes", "policy scores (after filter answered)"),),
    "prioritize": (
        ("parse_args", "JSON decode (orjson) + shape check"),
        ("map_candidates", "names -> state indices (reused)"),
        ("score_nodes", "policy scores"),
        ("scale_scores", "scale to 0..10"),
        ("_entries", "encode (per-node byte table)"),
    ),
}


MODULE_STAGES = ("parse_args", "map_candidates", "filter_candidates", "passed_of", "scale_scores")


def stage_profile(
    size: int, fill: float, window: int, pods: list[dict[str, Any]], policy_name: str = "fgd"
) -> str:
    """The stage table for ``pods`` scheduled one by one on a ``size``-node cluster."""
    cluster = EmbeddedCluster.synthetic(size)
    policy = make_policy(policy_name, PolicyContext(seed=0, workload=tuple(cluster.workload)))
    cluster.fill(policy, fill)
    extender = handlers.Extender(cluster, policy, cluster.binder(policy))
    with cluster.locked() as (_, node_names):
        names = list(node_names)
    current: list[str] = [""]
    spent: dict[tuple[str, str], list[int]] = {}

    def timed(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter_ns()
            try:
                return function(*args, **kwargs)
            finally:
                spent.setdefault((current[0], name), []).append(time.perf_counter_ns() - started)

        return wrapper

    originals = {name: getattr(handlers, name) for name in MODULE_STAGES if hasattr(handlers, name)}
    for name, function in originals.items():
        setattr(handlers, name, timed(name, function))
    try:
        return _run(extender, policy, timed, names, window, pods, current, spent)
    finally:
        for name, function in originals.items():
            setattr(handlers, name, function)


def _run(
    extender: handlers.Extender,
    policy: Any,
    timed: Callable[[str, Callable[..., Any]], Callable[..., Any]],
    names: list[str],
    window: int,
    pods: list[dict[str, Any]],
    current: list[str],
    spent: dict[tuple[str, str], list[int]],
) -> str:
    for name in ("_request", "_entries"):
        if hasattr(extender, name):
            setattr(extender, name, timed(name, getattr(extender, name)))
    extender.policy = _Timed(policy, timed("score_nodes", policy.score_nodes))
    verbs = {verb: timed("total", getattr(extender, verb)) for verb in STAGES}
    start = 0
    warmup = min(300, len(pods) // 4)
    for number, pod in enumerate(pods):
        if number == warmup:
            spent.clear()
        candidates = [names[(start + k) % len(names)] for k in range(window)]
        start = (start + window) % len(names)
        current[0] = "filter"
        passing = orjson.loads(
            verbs["filter"](orjson.dumps({"Pod": pod, "NodeNames": candidates}))[1]
        )
        if not passing["NodeNames"]:
            continue
        current[0] = "prescore"  # as the server does once filter's answer is written
        verbs["prescore"]()
        current[0] = "prioritize"
        body = orjson.dumps({"Pod": pod, "NodeNames": passing["NodeNames"]})
        scores = orjson.loads(verbs["prioritize"](body)[1])
        current[0] = "bind"
        metadata = pod["metadata"]
        binding = {"PodName": metadata["name"], "PodNamespace": metadata["namespace"]}
        binding |= {"PodUID": metadata["uid"], "Node": max(scores, key=itemgetter("Score"))["Host"]}
        extender.bind(orjson.dumps(binding))
    measured = len(pods) - warmup
    lines = [f"in-process stage profile, {len(names):,} nodes, {window} names ({measured} pods):"]
    lines.append(f"  {'stage':<48} {'p50 us':>8} {'mean us':>8}")
    for verb, stages in STAGES.items():
        total = np.array(spent.get((verb, "total"), [0])) / 1000
        named = 0.0
        for name, words in stages:
            calls = np.array(spent.get((verb, name), [0])) / 1000
            named += float(calls.sum()) / max(total.size, 1)
            lines.append(f"  {verb + ': ' + words:<48} {np.median(calls):8.1f} {calls.mean():8.1f}")
        lines.append(f"  {verb + ': other':<48} {'':>8} {total.mean() - named:8.1f}")
        lines.append(f"  {verb + ': total':<48} {np.median(total):8.1f} {total.mean():8.1f}")
    return "\n".join(lines)


class _Timed:
    """The policy with its ``score_nodes`` timed (every other attribute passed through)."""

    def __init__(self, policy: Any, score_nodes: Callable[..., Any]):
        self._policy = policy
        self.score_nodes = score_nodes

    def __getattr__(self, name: str) -> Any:
        return getattr(self._policy, name)


def print_stage_profile(
    size: int, fill: float, window: int, pods: list[dict[str, Any]], policy_name: str = "fgd"
) -> None:
    print(stage_profile(size, fill, window, pods, policy_name), file=sys.stderr, flush=True)
