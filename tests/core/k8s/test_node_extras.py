"""node_extras: kube-scheduler's NodeResourcesFit (for the resources the core does not
count, and the pod count) and NodePorts, as data and as masks over nodes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kubesage.core.k8s import extras_ledger, node_extras
from kubesage.core.k8s.extras_ledger import ExtrasLedger, ledger_for
from kubesage.core.k8s.node_extras import (
    PODS_REASON,
    PORTS_REASON,
    ExtrasMember,
    HostPort,
    NodeExtras,
    PodExtras,
    host_ports,
    place_with_extras,
    pod_extras,
)
from kubesage.core.k8s.translate import TranslateError, node_spec, pod_request
from kubesage.core.policy import PolicyContext, make_policy
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.types import Placement
from tests.core.k8s import v1_container, v1_node, v1_pod

RDMA = "rdma/hca_shared_devices_a"


def node(name: str, allocatable: dict[str, str | None] | None = None) -> dict[str, Any]:
    """A node with 8 GPUs and ``allocatable`` added (a None value drops the resource)."""
    obj = v1_node(name, gpus=8)
    published = obj["status"]["allocatable"]
    for key, value in (allocatable or {}).items():
        if value is None:
            published.pop(key, None)
        else:
            published[key] = value
    return obj


def cpus(obj: dict[str, Any], cpu: str) -> dict[str, Any]:
    obj["status"]["allocatable"]["cpu"] = cpu
    return obj


def ports_pod(name: str, *ports: dict[str, Any], host_network: bool = False) -> dict[str, Any]:
    container = v1_container(requests={"cpu": "1", "memory": "1Gi"})
    container["ports"] = list(ports)
    pod = v1_pod(name, containers=[container])
    if host_network:
        pod["spec"]["hostNetwork"] = True
    return pod


def asking(name: str, requests: dict[str, str]) -> dict[str, Any]:
    wanted = {"cpu": "1", "memory": "1Gi"} | requests
    return v1_pod(name, containers=[v1_container(requests=wanted)])


# -- what a pod asks for ------------------------------------------------------------------


def test_a_pods_extras_are_its_effective_requests_beyond_the_cores_resources() -> None:
    init = v1_container("init", requests={RDMA: "3", "ephemeral-storage": "1Gi"})
    sidecar = v1_container("proxy", requests={RDMA: "1"}, restart_policy="Always")
    pod = v1_pod(
        "p",
        containers=[
            v1_container(
                requests={"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "1", RDMA: "1"},
                limits={"hugepages-2Mi": "1Mi"},  # a limit alone requests the limit
            ),
            v1_container("b", requests={RDMA: "1", "nvidia.com/mig-1g.10gb": "1"}),
        ],
        init_containers=[sidecar, init],
        overhead={"ephemeral-storage": "1k"},
    )
    extras = pod_extras(pod)
    # rdma: max(app 2 + sidecar 1, sidecar 1 + init 3) = 4; ephemeral storage first.
    assert extras.resources == (
        ("ephemeral-storage", 2**30 + 1000),
        ("hugepages-2Mi", 2**20),
        (RDMA, 4),
    )
    assert extras.ports == ()
    assert pod_extras(v1_pod("plain")) == PodExtras()  # CPU and memory are the core's


def test_fractions_round_up_and_malformed_requests_raise() -> None:
    assert pod_extras(asking("p", {"ephemeral-storage": "1.5"})).resources == (
        ("ephemeral-storage", 2),
    )
    with pytest.raises(TranslateError):
        pod_extras(asking("bad", {"ephemeral-storage": "lots"}))


def test_host_ports_default_as_the_api_server_and_kube_scheduler_read_them() -> None:
    pod = ports_pod(
        "p",
        {"containerPort": 80, "hostPort": 8080},  # TCP, every IP
        {"containerPort": 53, "hostPort": 53, "protocol": "UDP", "hostIP": "10.0.0.1"},
        {"containerPort": 9000},  # no host port
    )
    assert host_ports(pod["spec"]) == (
        HostPort("TCP", "0.0.0.0", 8080),
        HostPort("UDP", "10.0.0.1", 53),
    )
    # hostNetwork: a port with no hostPort takes its containerPort.
    net = ports_pod("n", {"containerPort": 29500, "protocol": "TCP"}, host_network=True)
    assert host_ports(net["spec"]) == (HostPort("TCP", "0.0.0.0", 29500),)
    # A sidecar's ports count; a plain init container's, which has ended, do not.
    side = v1_container("side", restart_policy="Always")
    side["ports"] = [{"containerPort": 1, "hostPort": 7000}]
    once = v1_container("once")
    once["ports"] = [{"containerPort": 1, "hostPort": 7001}]
    pod = v1_pod("s", init_containers=[side, once])
    assert host_ports(pod["spec"]) == (HostPort("TCP", "0.0.0.0", 7000),)


# -- what fits a node ------------------------------------------------------------------


def test_a_resource_fits_up_to_the_nodes_allocatable_and_not_where_unpublished() -> None:
    use = NodeExtras({"a": node("a", {RDMA: "2"}), "b": node("b")}, ["a", "b"])
    two = pod_extras(asking("p", {RDMA: "2"}))
    mask = use.mask(two)
    assert mask is not None and mask.tolist() == [True, False]
    use.count("a", pod_extras(asking("q", {RDMA: "1"})))
    mask = use.mask(two)
    assert mask is not None and mask.tolist() == [False, False]
    one = pod_extras(asking("r", {RDMA: "1"}))
    mask = use.mask(one)
    assert mask is not None and mask.tolist() == [True, False]
    assert use.reasons(two, 0) == [f"Insufficient {RDMA}"]
    assert use.reasons(one, 1) == [f"Insufficient {RDMA}"]  # b publishes none: 0
    assert use.mask(PodExtras()) is None  # nothing extra asked: every node


def test_the_pod_count_is_checked_where_the_node_publishes_it() -> None:
    nodes = {"full": node("full", {"pods": "2"}), "open": node("open", {"pods": None})}
    use = NodeExtras(nodes, ["full", "open"])
    assert use.mask(PodExtras()) is None
    for _ in range(2):
        use.count("full", PodExtras())
        use.count("open", PodExtras())
    mask = use.mask(PodExtras())
    assert mask is not None and mask.tolist() == [False, True]
    assert use.reasons(PodExtras(), 0) == [PODS_REASON]
    assert use.refusal(PodExtras(), "full") == "NodeResourcesFit: Too many pods"
    assert use.refusal(PodExtras(), "open") is None


@pytest.mark.parametrize(
    ("held", "wanted", "conflict"),
    [
        (("TCP", "0.0.0.0", 80), ("TCP", "10.0.0.1", 80), True),  # the wildcard holds every IP
        (("TCP", "10.0.0.1", 80), ("TCP", "0.0.0.0", 80), True),
        (("TCP", "10.0.0.1", 80), ("TCP", "10.0.0.1", 80), True),
        (("TCP", "10.0.0.1", 80), ("TCP", "10.0.0.2", 80), False),  # two IPs, one port each
        (("TCP", "0.0.0.0", 80), ("UDP", "0.0.0.0", 80), False),
        (("TCP", "0.0.0.0", 80), ("TCP", "0.0.0.0", 81), False),
    ],
)
def test_host_ports_conflict_as_in_kube_schedulers_node_ports(
    held: tuple[str, str, int], wanted: tuple[str, str, int], conflict: bool
) -> None:
    use = NodeExtras({"a": node("a")}, ["a"])
    use.count("a", PodExtras(ports=(HostPort(*held),)))
    asked = PodExtras(ports=(HostPort(*wanted),))
    assert (use.mask(asked) is not None) is conflict
    assert use.reasons(asked, 0) == ([PORTS_REASON] if conflict else [])
    if conflict:
        assert use.refusal(asked, "a") == f"NodePorts: {PORTS_REASON}"


def test_added_placements_roll_back_to_a_mark() -> None:
    use = NodeExtras({"a": node("a", {"pods": "1", RDMA: "1"})}, ["a"])
    asked = PodExtras(((RDMA, 1),), (HostPort("TCP", "0.0.0.0", 29500),))
    assert use.mask(asked) is None
    mark = use.mark()
    use.add("a", asked)
    use.add("elsewhere", asked)  # not one of the names: ignored
    assert use.reasons(asked, 0) == [PORTS_REASON]
    assert use.reasons(PodExtras(((RDMA, 1),)), 0) == [PODS_REASON, f"Insufficient {RDMA}"]
    assert use.summary(PodExtras(((RDMA, 1),)), [0]) == (
        f"{PODS_REASON} (1 node); Insufficient {RDMA} (1 node)"
    )
    use.rollback(mark)
    assert use.mask(asked) is None
    use.count("a", asked)  # a bound pod...
    assert use.mask(asked) is not None
    use.remove("a", asked)  # ...whose bind failed
    assert use.mask(asked) is None


def test_one_ledger_per_cluster_sync() -> None:
    class Sync:
        pass

    one, other = Sync(), Sync()
    assert ledger_for(one) is ledger_for(one)
    assert ledger_for(one) is not ledger_for(other)


# -- the ledger -------------------------------------------------------------------------


def bound(pod: dict[str, Any], node_name: str, version: str = "1") -> dict[str, Any]:
    pod["spec"]["nodeName"] = node_name
    pod["metadata"]["resourceVersion"] = version
    return pod


def test_the_ledger_reads_each_pod_once_per_version(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[str] = []
    real = node_extras.pod_extras

    def counting(pod: dict[str, Any]) -> PodExtras:
        reads.append(pod["metadata"]["name"])
        return real(pod)

    monkeypatch.setattr(extras_ledger, "pod_extras", counting)
    ledger = ExtrasLedger()
    nodes = {"a": node("a", {RDMA: "2"})}
    pods = [bound(asking(f"p{i}", {RDMA: "1"}), "a") for i in range(2)]
    for _ in range(3):
        use = ledger.use(nodes, ["a"], pods, lambda key: None)
        assert use.refusal(PodExtras(((RDMA, 1),)), "a") == f"NodeResourcesFit: Insufficient {RDMA}"
    assert reads == ["p0", "p1"]
    pods[0] = bound(asking("p0", {RDMA: "0"}), "a", version="2")
    use = ledger.use(nodes, ["a"], pods, lambda key: None)
    assert use.refusal(PodExtras(((RDMA, 1),)), "a") is None
    assert reads == ["p0", "p1", "p0"]


def test_placed_pods_count_until_the_watch_shows_them_or_their_assumption_goes() -> None:
    ledger = ExtrasLedger()
    nodes = {"a": node("a")}
    pod = ports_pod("p", {"containerPort": 80, "hostPort": 80})
    asked = pod_extras(pod)
    assumed: dict[str, Placement] = {}

    def placement_of(key: str) -> Placement | None:
        return assumed.get(key)

    ledger.placed(pod, "a")
    assumed[pod["metadata"]["uid"]] = Placement(node="a", node_index=0)
    assert ledger.use(nodes, ["a"], [], placement_of).refusal(asked, "a") is not None
    # The pod itself is never counted against itself.
    skip = pod["metadata"]["uid"]
    assert ledger.use(nodes, ["a"], [], placement_of, skip=skip).refusal(asked, "a") is None
    # Once bound, the bound pod counts (once), and the record goes.
    seen = bound(ports_pod("p", {"containerPort": 80, "hostPort": 80}), "a")
    use = ledger.use(nodes, ["a"], [seen], placement_of)
    assert use.reasons(PodExtras(), 0) == []
    use.add("a", PodExtras())
    assert use.refusal(asked, "a") == f"NodePorts: {PORTS_REASON}"
    assert ledger.use(nodes, ["a"], [], placement_of).refusal(asked, "a") is None
    # An assumption that is gone (expired, forgotten) takes the record with it.
    ledger.placed(pod, "a")
    assert ledger.use(nodes, ["a"], [], placement_of).refusal(asked, "a") is not None
    assumed.clear()
    assert ledger.use(nodes, ["a"], [], placement_of).refusal(asked, "a") is None


def test_a_pod_admitted_before_its_assumption_counts_meanwhile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The loop's binds admit a pod before the bind path assumes it: another placement
    asking in between must still see its ports taken."""
    clock = [100.0]
    monkeypatch.setattr(extras_ledger.time, "monotonic", lambda: clock[0])
    ledger = ExtrasLedger()
    nodes = {"a": node("a")}
    pod = ports_pod("p", {"containerPort": 80, "hostPort": 80})
    asked = pod_extras(pod)
    ledger.placed(pod, "a")  # admitted; not assumed yet

    def nowhere(key: str) -> Placement | None:
        return None

    clock[0] += extras_ledger.UNASSUMED_GRACE_S - 1
    assert ledger.use(nodes, ["a"], [], nowhere).refusal(asked, "a") == f"NodePorts: {PORTS_REASON}"
    clock[0] += 2  # its bind was refused before it was assumed: it goes in time
    assert ledger.use(nodes, ["a"], [], nowhere).refusal(asked, "a") is None


# -- placing gang members ---------------------------------------------------------------


def state_of(*nodes: dict[str, Any]) -> ClusterState:
    return ClusterState([node_spec(obj) for obj in nodes])


def test_gang_members_see_the_host_ports_of_the_members_placed_before_them() -> None:
    objects = [node("a"), node("b")]
    state = state_of(*objects)
    use = NodeExtras({obj["metadata"]["name"]: obj for obj in objects}, state.node_names)
    pods = [ports_pod(f"m{i}", {"containerPort": 29500}, host_network=True) for i in range(2)]
    members = [ExtrasMember(pod_request(pod), None, pod_extras(pod)) for pod in pods]
    policy = make_policy("bestfit", PolicyContext())
    outcome = place_with_extras(state.copy(), members, policy, use)
    assert outcome.placements is not None
    assert sorted(p.node for p in outcome.placements) == ["a", "b"]  # bestfit would pack
    # Both stay counted: a third member finds no node, and says why.
    third = ports_pod("m2", {"containerPort": 29500}, host_network=True)
    member = ExtrasMember(pod_request(third), None, pod_extras(third))
    mark = use.mark()
    failed = place_with_extras(state.copy(), [member], policy, use)
    assert failed.placements is None
    assert failed.reason == f"ml/m2 (0 of 1 placed): no node fits: {PORTS_REASON} (2 nodes)"
    assert use.mark() == mark


def test_a_gang_that_does_not_fit_leaves_the_counts_as_they_were() -> None:
    objects = [node("a"), node("b", {"pods": "0"})]
    state = state_of(*objects)
    use = NodeExtras({obj["metadata"]["name"]: obj for obj in objects}, state.node_names)
    pods = [ports_pod(f"m{i}", {"containerPort": 29500, "hostPort": 29500}) for i in range(2)]
    members = [ExtrasMember(pod_request(pod), None, pod_extras(pod)) for pod in pods]
    outcome = place_with_extras(state.copy(), members, make_policy("bestfit", PolicyContext()), use)
    assert outcome.placements is None
    assert outcome.reason == (
        f"ml/m1 (1 of 2 placed): no node fits: {PORTS_REASON} (1 node); {PODS_REASON} (1 node)"
    )
    assert use.mark() == 0
    mask = use.mask(pod_extras(pods[0]))  # b still refuses (its pod count), a is free again
    assert mask is not None and mask.tolist() == [True, False]


def test_a_node_the_extras_refuse_is_counted_by_their_reasons_only() -> None:
    objects = [cpus(node("a"), "1"), node("b", {RDMA: "0"})]
    state = state_of(*objects)
    use = NodeExtras({obj["metadata"]["name"]: obj for obj in objects}, state.node_names)
    pod = asking("p", {"cpu": "2", RDMA: "1"})
    policy = make_policy("bestfit", PolicyContext())
    members = [ExtrasMember(pod_request(pod), np.array([True, True]), pod_extras(pod))]
    outcome = place_with_extras(state.copy(), members, policy, use)
    assert outcome.placements is None
    # a lacks CPU too, but the extras refused it first: counted once, by their reason.
    assert outcome.reason.endswith(f"no node fits: Insufficient {RDMA} (2 nodes)")
    # A node the pod's spec rules out (taints, affinity) is not the extras' to count, nor
    # a lack of CPU (the policy sees it hidden): it is named as left out by the filters.
    members = [ExtrasMember(pod_request(pod), np.array([True, False]), pod_extras(pod))]
    outcome = place_with_extras(state.copy(), members, policy, use)
    assert outcome.reason.endswith(
        f"no node fits: Insufficient {RDMA} (1 node); left out by the pod's node filters "
        "(nodeSelector, affinity, taints, cordons, GPUs or MIG instances not advertised) (1 node)"
    )
    assert "CPU" not in outcome.reason


def test_the_core_reasons_of_nodes_the_extras_let_through_are_kept() -> None:
    objects = [cpus(node("a"), "1"), node("b", {RDMA: "0"})]
    state = state_of(*objects)
    use = NodeExtras({obj["metadata"]["name"]: obj for obj in objects}, state.node_names)
    use.count("a", PodExtras())  # a fits the extras; b does not
    pod = asking("p", {"cpu": "2"})
    pod["spec"]["containers"][0]["ports"] = [{"containerPort": 1, "hostPort": 80}]
    use.count("b", PodExtras(ports=(HostPort("TCP", "0.0.0.0", 80),)))
    members = [ExtrasMember(pod_request(pod), None, pod_extras(pod))]
    outcome = place_with_extras(state.copy(), members, make_policy("bestfit", PolicyContext()), use)
    assert outcome.placements is None
    words = outcome.reason.split("no node fits: ", 1)[1]
    assert words == f"allocatable CPU is below the pod's 2000m (1 node); {PORTS_REASON} (1 node)"
