"""Every path that asks "does this pod fit" agrees with the one fit rule.

Random clusters (H100, T4, MIG-mode A100 and CPU-only nodes, built from v1 Node
JSON), filled with random pods (MIG included) and with some GPUs cordoned, and a
random pod (v1 Pod JSON, with GPU model constraints): the fit mask, its reasons,
``ClusterState.feasible`` (whole cluster and subsets), every policy's ``decide``,
the extender's filter over real JSON, and ``allocate`` all say the same thing.
"""

from __future__ import annotations

import functools
from itertools import combinations
from typing import Any

import numpy as np
import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubesage.core.errors import CapacityError
from kubesage.core.k8s.embedded import EmbeddedCluster
from kubesage.core.k8s.extender import Extender
from kubesage.core.k8s.extender_wire import ExtenderFilterResult
from kubesage.core.k8s.translate import node_spec, pod_request
from kubesage.core.policy import Policy, PolicyContext, make_policy, policy_names
from kubesage.core.state import NO_REASON, ClusterState, FitCheck, fit_mask, fit_report
from kubesage.core.traces.synthetic import synthetic_workload
from kubesage.core.types import Placement, PodRequest
from tests.core.k8s import v1_container, v1_node, v1_pod

H100 = "NVIDIA-H100-80GB-HBM3"
T4 = "Tesla-T4"
A100 = "NVIDIA-A100-SXM4-80GB"
WORKLOAD = tuple(synthetic_workload(300, seed=0))
GPU_ASKS = ["", "1", "2", "4", "8", "share", "mig-1g.10gb", "mig-3g.40gb", "mig-7g.80gb"]


def node_json(name: str, kind: str, cpu: str, memory: str) -> dict[str, Any]:
    if kind == "h100":
        return v1_node(name, cpu=cpu, memory=memory, gpus=8, product=H100)
    if kind == "t4":
        return v1_node(name, cpu=cpu, memory=memory, gpus=2, product=T4)
    if kind == "mig":
        return v1_node(name, cpu=cpu, memory=memory, gpus=4, product=A100, mig={"3g.40gb": 8})
    return v1_node(name, cpu=cpu, memory=memory, gpus=0, product=None)


nodes_strategy = st.lists(
    st.tuples(
        st.sampled_from(["h100", "t4", "mig", "cpu"]),
        st.sampled_from(["8", "16", "96"]),
        st.sampled_from(["32Gi", "256Gi", "754Gi"]),
    ),
    min_size=1,
    max_size=7,
)


@st.composite
def pod_json(draw: st.DrawFn, name: str = "p") -> dict[str, Any]:
    gpu = draw(st.sampled_from(GPU_ASKS))
    requests = {
        "cpu": f"{draw(st.integers(0, 40_000))}m",
        "memory": f"{draw(st.integers(0, 300))}Gi",
    }
    annotations: dict[str, str] = {}
    selector: dict[str, str] | None = None
    if gpu.startswith("mig-"):
        requests[f"nvidia.com/{gpu}"] = "1"
    elif gpu:
        requests["nvidia.com/gpu"] = "1" if gpu == "share" else gpu
        if gpu == "share":
            annotations["kubesage.io/gpu-milli"] = str(draw(st.sampled_from([100, 300, 500, 900])))
        product = draw(st.sampled_from([None, H100, T4]))
        if product:
            selector = {"nvidia.com/gpu.product": product}
    return v1_pod(
        name,
        containers=[v1_container(requests=requests)],
        annotations=annotations,
        node_selector=selector,
    )


@functools.cache
def policy(name: str) -> Policy:
    """One instance per policy for the whole module (ppo loads its model once)."""
    return make_policy(name, PolicyContext(seed=0, workload=WORKLOAD))


def placements(state: ClusterState, node: int, request: PodRequest) -> list[Placement]:
    """Every placement of ``request`` on ``node`` that allocate could be asked for."""
    gpus = int(state.gpu_count[node])
    if request.num_gpu == 0:
        return [state.placement(node, (), request)]
    if request.mig is not None:
        return [
            state.placement(node, (gpu,), request, mig_start=start)
            for gpu in range(gpus)
            for start in request.mig.starts
        ]
    return [
        state.placement(node, chosen, request)
        for chosen in combinations(range(gpus), request.num_gpu)
    ]


def allocates(state: ClusterState, request: PodRequest, placement: Placement) -> bool:
    """Does allocate accept ``placement``? (Released again at once.)"""
    try:
        state.allocate(request, placement)
    except CapacityError:
        return False
    state.release(request, placement)
    return True


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    nodes=nodes_strategy,
    fill=st.lists(pod_json("fill"), max_size=20),
    cordons=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 7)), max_size=3),
    pod=pod_json(),
    policy_name=st.sampled_from(policy_names()),
    picks=st.lists(st.integers(0, 6), min_size=1, max_size=3),
)
def test_every_path_agrees_with_the_fit_rule(
    nodes: list[tuple[str, str, str]],
    fill: list[dict[str, Any]],
    cordons: list[tuple[int, int]],
    pod: dict[str, Any],
    policy_name: str,
    picks: list[int],
) -> None:
    node_objects = [
        node_json(f"n{index}", kind, cpu, memory) for index, (kind, cpu, memory) in enumerate(nodes)
    ]
    cluster = EmbeddedCluster([node_spec(n) for n in node_objects], list(WORKLOAD), "random")
    state = cluster.state
    filler = policy("bestfit")
    for number, other in enumerate(fill):
        request = pod_request(other).model_copy(update={"name": f"fill-{number}"})
        decision = filler.decide(state, request)
        if decision.placement is not None:
            state.allocate(request, decision.placement)
    for node, gpu in {(n % state.num_nodes, g) for n, g in cordons}:
        if gpu < state.gpu_count[node]:
            state.cordon_gpu(node, gpu)
    request = pod_request(pod)

    # The mask, its reasons and ClusterState.feasible.
    report = fit_report(state, request)
    mask = fit_mask(state, request)
    assert report.fits.tolist() == mask.tolist() == state.feasible(request).tolist()
    assert ((report.reasons == NO_REASON) == mask).all()
    for position in np.flatnonzero(~mask).tolist():
        reason = report.reason(position)
        assert reason is not None and reason in FitCheck
    subset = np.array([p % state.num_nodes for p in picks], dtype=np.int64)
    assert state.feasible(request, subset).tolist() == mask[subset].tolist()
    assert fit_report(state, request, subset).reasons.tolist() == report.reasons[subset].tolist()

    # allocate accepts some placement on a node exactly where the rule says it fits,
    # and the policies' own placement there.
    for node in range(state.num_nodes):
        accepted = any(allocates(state, request, p) for p in placements(state, node, request))
        assert accepted == bool(mask[node]), (state.node_names[node], report.reason(node))
        if mask[node]:
            assert allocates(state, request, policy(policy_name).placement_on(state, node, request))

    # decide: scheduled iff some node fits, on a node that fits.
    decision = policy(policy_name).decide(state, request)
    assert decision.scheduled == bool(mask.any())
    if decision.placement is not None:
        assert mask[decision.placement.node_index]
        assert allocates(state, request, decision.placement)
    else:
        top = next(iter(report.counts()))
        assert decision.explanation.startswith(f"no node fits: {top.words(request)}")

    # The extender's filter over real JSON: passes, reasons and their kind.
    names = [n["metadata"]["name"] for n in node_objects]
    extender = Extender(cluster, policy(policy_name))
    status, body = extender.filter(orjson.dumps({"Pod": pod, "NodeNames": names}))
    assert status == 200
    result = ExtenderFilterResult.model_validate_json(body)
    assert result.node_names == [name for name, fits in zip(names, mask, strict=True) if fits]
    for position in np.flatnonzero(~mask).tolist():
        check = report.reason(position)
        assert check is not None
        failed = result.failed_and_unresolvable_nodes if check.unresolvable else result.failed_nodes
        assert failed[names[position]] == f"kubesage: {check.words(request)}"
    assert len(result.failed_nodes) + len(result.failed_and_unresolvable_nodes) == int(
        (~mask).sum()
    )
