"""The extender handlers on real request shapes: ExtenderArgs with full v1 Pods.

A small cluster built from v1 Node JSON (through translate) lets every answer be
checked against what the nodes can hold: H100 nodes, a busy one, a MIG node and a
CPU-only node.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubesage.core.k8s.embedded import EmbeddedCluster
from kubesage.core.k8s.extender import PRESCORES_UNUSED_LIMIT, Extender
from kubesage.core.k8s.extender_wire import (
    MAX_EXTENDER_PRIORITY,
    ExtenderArgs,
    ExtenderBindingResult,
    ExtenderFilterResult,
    ExtenderRequestError,
    HostPriority,
    scale_scores,
)
from kubesage.core.k8s.translate import node_spec, pod_request
from kubesage.core.policy import PolicyContext, make_policy
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.traces.synthetic import synthetic_workload
from tests.core.k8s import v1_container, v1_node, v1_pod

NODES = [
    v1_node("h100-a", rack="r1"),
    v1_node("h100-b", rack="r1"),
    v1_node("h100-small", gpus=2, cpu="16", memory="64Gi", rack="r2"),
    v1_node("a100-mig", gpus=4, product="NVIDIA-A100-SXM4-80GB", mig={"3g.40gb": 8}),
    v1_node("cpu-only", gpus=0, product=None, cpu="64", memory="256Gi"),
]
NAMES = [node["metadata"]["name"] for node in NODES]


def gpu_pod(name: str, gpus: str = "4", cpu: str = "8", memory: str = "64Gi") -> dict[str, Any]:
    return v1_pod(
        name,
        containers=[
            v1_container(
                requests={"cpu": cpu, "memory": memory, "nvidia.com/gpu": gpus},
                limits={"nvidia.com/gpu": gpus},
            )
        ],
    )


def pod_asking(gpu: str, *, cpu_milli: int, memory: str) -> dict[str, Any]:
    """Pod "p" asking for ``gpu``: "" (none), a count, "share" (0.3 of one GPU) or a
    MIG resource "mig-<profile>"."""
    requests = {"cpu": f"{cpu_milli}m", "memory": memory}
    annotations = {}
    if gpu.startswith("mig-"):
        requests[f"nvidia.com/{gpu}"] = "1"
    elif gpu == "share":
        requests["nvidia.com/gpu"] = "1"
        annotations["kubesage.io/gpu-milli"] = "300"
    elif gpu:
        requests["nvidia.com/gpu"] = gpu
    return v1_pod("p", containers=[v1_container(requests=requests)], annotations=annotations)


def make_extender(policy: str = "fgd") -> tuple[Extender, EmbeddedCluster]:
    cluster = EmbeddedCluster(
        [node_spec(node) for node in NODES], synthetic_workload(500, seed=0), "test cluster"
    )
    scoring = make_policy(policy, PolicyContext(seed=0, workload=tuple(cluster.workload)))
    return Extender(cluster, scoring, cluster.binder(scoring)), cluster


def args(pod: dict[str, Any], names: list[str] | None = None, **extra: Any) -> bytes:
    body: dict[str, Any] = {"Pod": pod, "NodeNames": NAMES if names is None else names}
    body.update(extra)
    return orjson.dumps(body)


def filter_result(extender: Extender, body: bytes) -> ExtenderFilterResult:
    status, content = extender.filter(body)
    assert status == 200
    return ExtenderFilterResult.model_validate_json(content)


def priorities(extender: Extender, body: bytes) -> dict[str, int]:
    status, content = extender.prioritize(body)
    assert status == 200
    hosts = [HostPriority.model_validate(entry) for entry in orjson.loads(content)]
    return {host.host: host.score for host in hosts}


def bind(extender: Extender, pod: dict[str, Any], node: str) -> str:
    metadata = pod["metadata"]
    status, content = extender.bind(
        orjson.dumps(
            {
                "PodName": metadata["name"],
                "PodNamespace": metadata["namespace"],
                "PodUID": metadata["uid"],
                "Node": node,
            }
        )
    )
    assert status == 200
    return ExtenderBindingResult.model_validate_json(content).error


def test_filter_keeps_nodes_that_fit_and_explains_the_others() -> None:
    extender, _ = make_extender()
    result = filter_result(extender, args(gpu_pod("trainer-0", gpus="4")))
    assert result.node_names == ["h100-a", "h100-b"]
    assert result.error == "" and result.nodes is None
    assert result.failed_and_unresolvable_nodes == {
        "h100-small": "kubesage: fewer than 4 GPUs on the node",
        "a100-mig": "kubesage: GPUs are in MIG mode (pod is not MIG)",
        "cpu-only": "kubesage: no GPU of an allowed model (any)",
    }
    assert result.failed_nodes == {}


def test_resolvable_failures_after_the_node_fills_up() -> None:
    extender, cluster = make_extender()
    first = gpu_pod("trainer-0", gpus="8")
    filter_result(extender, args(first))
    assert bind(extender, first, "h100-a") == ""
    result = filter_result(extender, args(gpu_pod("trainer-1", gpus="2")))
    assert result.failed_nodes == {"h100-a": "kubesage: fewer than 2 wholly free GPUs"}
    assert "h100-b" in (result.node_names or [])
    assert cluster.state.gpu_whole_free_count[cluster.state.node_index["h100-a"]] == 0


def test_bind_without_filter_is_refused_with_a_reason() -> None:
    extender, _ = make_extender()
    error = bind(extender, gpu_pod("stranger"), "h100-a")
    assert "never filtered or prioritized here" in error


def test_bind_twice_is_idempotent_and_never_double_books() -> None:
    extender, cluster = make_extender()
    pod = gpu_pod("trainer-0", gpus="4")
    filter_result(extender, args(pod))
    assert bind(extender, pod, "h100-b") == ""
    assert bind(extender, pod, "h100-b") == ""  # kube-scheduler retried: no second booking
    assert "already bound to h100-b" in bind(extender, pod, "h100-a")
    index = cluster.state.node_index["h100-b"]
    assert cluster.state.gpu_whole_free_count[index] == 4


def test_prioritize_scores_in_range_best_node_ten_infeasible_zero() -> None:
    extender, _ = make_extender()
    # Make h100-a partly used, so FGD prefers one of the two H100 nodes.
    warm = gpu_pod("warm", gpus="3", cpu="4", memory="8Gi")
    filter_result(extender, args(warm))
    assert bind(extender, warm, "h100-a") == ""
    scores = priorities(extender, args(gpu_pod("trainer-1", gpus="1", cpu="2", memory="8Gi")))
    assert set(scores) == set(NAMES)
    assert all(0 <= score <= MAX_EXTENDER_PRIORITY for score in scores.values())
    assert max(scores.values()) == MAX_EXTENDER_PRIORITY
    assert scores["cpu-only"] == 0 and scores["a100-mig"] == 0


def test_mig_pod_goes_to_the_mig_node_only() -> None:
    extender, cluster = make_extender()
    pod = v1_pod("infer-0", containers=[v1_container(limits={"nvidia.com/mig-3g.40gb": "1"})])
    result = filter_result(extender, args(pod))
    assert result.node_names == ["a100-mig"]
    assert result.failed_and_unresolvable_nodes["h100-a"] == (
        "kubesage: GPUs are not in MIG mode (MIG pod)"
    )
    assert priorities(extender, args(pod, ["a100-mig"])) == {"a100-mig": 10}
    assert bind(extender, pod, "a100-mig") == ""
    bound = cluster.bound[pod["metadata"]["uid"]]
    assert bound.placement.mig_start in (0, 4)


def test_full_node_objects_when_not_node_cache_capable() -> None:
    extender, _ = make_extender()
    body = orjson.dumps({"Pod": gpu_pod("trainer-0"), "Nodes": {"items": NODES}})
    result = filter_result(extender, body)
    assert result.node_names is None and result.nodes is not None
    assert [item["metadata"]["name"] for item in result.nodes.items] == ["h100-a", "h100-b"]
    assert result.nodes.items[0] == NODES[0]  # returned as sent


def test_unknown_nodes_pass_through_and_score_zero() -> None:
    extender, _ = make_extender()
    names = ["h100-a", "joined-a-second-ago"]
    result = filter_result(extender, args(gpu_pod("trainer-0"), names))
    assert result.node_names == names
    assert priorities(extender, args(gpu_pod("trainer-0"), names))["joined-a-second-ago"] == 0


def test_pod_outside_the_core_model_passes_everywhere() -> None:
    extender, _ = make_extender()
    pod = v1_pod("two-migs", containers=[v1_container(limits={"nvidia.com/mig-1g.10gb": "2"})])
    assert filter_result(extender, args(pod)).node_names == NAMES
    assert set(priorities(extender, args(pod)).values()) == {0}


def test_lower_case_keys_are_read_like_gos_decoder() -> None:
    extender, _ = make_extender()
    body = orjson.dumps({"pod": gpu_pod("trainer-0"), "nodenames": ["h100-a"]})
    assert filter_result(extender, body).node_names == ["h100-a"]


def test_an_empty_node_list_as_go_writes_it_is_read() -> None:
    """Go encodes an empty ``v1.NodeList``'s nil slice as ``"items": null``."""
    extender, _ = make_extender()
    body = orjson.dumps({"Pod": gpu_pod("p"), "Nodes": {"metadata": {}, "items": None}})
    status, answer = extender.filter(body)
    assert status == 200
    assert orjson.loads(answer)["Nodes"] == {"items": []}


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (b"", "invalid JSON"),
        (b"[]", "expected a JSON object, got list"),
        (b'{"NodeNames": []}', r"ExtenderArgs.Pod: expected a v1 Pod object"),
        (b'{"Pod": {"metadata": {"name": "x"}}}', "neither NodeNames nor Nodes"),
        (b'{"Pod": {"metadata": {"name": "x"}}, "NodeNames": "n1"}', "expected a list"),
        (b'{"Pod": {"metadata": {"name": "x"}}, "NodeNames": [1]}', r"NodeNames\[0\]"),
        (b'{"Pod": {"metadata": {"name": "x"}}, "NodeNames": [[]]}', "must be a string"),
    ],
)
def test_malformed_requests_name_the_problem(body: bytes, match: str) -> None:
    extender, _ = make_extender()
    with pytest.raises(ExtenderRequestError, match=match):
        extender.filter(body)
    with pytest.raises(ExtenderRequestError, match=match):
        extender.prioritize(body)


@pytest.mark.parametrize(
    ("pod", "match"),
    [
        ({"metadata": {}}, "metadata.name: missing"),
        (gpu_pod("p", gpus="1.5"), "extended resource count 1.5 is not a whole number"),
    ],
)
def test_a_pod_kubesage_cannot_read_is_filters_error_which_kube_scheduler_shows(
    pod: dict[str, Any], match: str
) -> None:
    # kube-scheduler reads an extender's body only on a 200: filter answers the pod's
    # problem in ExtenderFilterResult.Error, which ends up in the pod's events.
    extender, _ = make_extender()
    body = orjson.dumps({"Pod": pod, "NodeNames": ["h100-a"]})
    status, answer = extender.filter(body)
    assert status == 200
    result = ExtenderFilterResult.model_validate_json(answer)
    assert result.error.startswith("kubesage: Pod: ") and re.search(match, result.error)
    assert not result.node_names and not result.failed_nodes
    with pytest.raises(ExtenderRequestError, match=match):  # no Error field there: a 400
        extender.prioritize(body)


def test_wire_models_use_the_go_field_names() -> None:
    parsed = ExtenderArgs.model_validate_json(args(gpu_pod("p"), ["n1"]))
    assert parsed.node_names == ["n1"]
    dumped = ExtenderFilterResult(node_names=["n1"]).model_dump(by_alias=True)
    assert set(dumped) == {
        "Nodes",
        "NodeNames",
        "FailedNodes",
        "FailedAndUnresolvableNodes",
        "Error",
    }
    assert HostPriority(host="n1", score=3).model_dump(by_alias=True) == {"Host": "n1", "Score": 3}


def test_prioritize_answer_is_byte_for_byte_what_orjson_writes() -> None:
    extender, _ = make_extender()
    status, content = extender.prioritize(args(gpu_pod("p", gpus="1")))
    assert status == 200
    assert content == orjson.dumps(orjson.loads(content))


def test_translated_pod_is_reused_by_uid_and_resource_version() -> None:
    extender, _ = make_extender()
    pod = gpu_pod("p")
    filter_result(extender, args(pod))
    resources = pod["spec"]["containers"][0]["resources"]
    resources["requests"]["nvidia.com/gpu"] = resources["limits"]["nvidia.com/gpu"] = "16"
    # Same uid and resourceVersion: the cached request (4 GPUs) is used...
    assert filter_result(extender, args(pod)).node_names == ["h100-a", "h100-b"]
    # ...a new resourceVersion is translated again: 16 GPUs fit nowhere.
    pod["metadata"]["resourceVersion"] = "51878"
    assert pod_request(pod).num_gpu == 16
    assert filter_result(extender, args(pod)).node_names == []


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ([50.0, 50.0, 50.0], [10, 10, 10]),
        ([0.0, 50.0, 100.0], [0, 5, 10]),
        ([-3.0, float("-inf"), 7.0], [0, 0, 10]),
        ([float("nan")], [10]),
    ],
)
def test_scale_scores(raw: list[float], expected: list[int]) -> None:
    assert scale_scores(np.array(raw)).tolist() == expected


@pytest.mark.parametrize("name", ["fgd", "bestfit", "ppo"])
def test_prioritize_gives_the_policys_own_choice_the_top_score(name: str) -> None:
    extender, cluster = make_extender(name)
    warm = gpu_pod("warm", gpus="3", cpu="4", memory="8Gi")
    filter_result(extender, args(warm))
    assert bind(extender, warm, "h100-a") == ""
    pod = gpu_pod("p", gpus="1", cpu="2", memory="8Gi")
    scores = priorities(extender, args(pod))
    decision = extender.policy.decide(cluster.state, pod_request(pod))
    assert decision.placement is not None
    assert scores[decision.placement.node] == MAX_EXTENDER_PRIORITY
    assert scores["cpu-only"] == scores["a100-mig"] == 0


@settings(max_examples=60, deadline=None)
@given(
    fill_seed=st.integers(0, 2**16),
    fill=st.floats(0.0, 0.9),
    cpu=st.integers(0, 70_000),
    memory_gib=st.integers(0, 800),
    gpu=st.sampled_from(["", "1", "2", "4", "8", "share", "mig-3g.40gb", "mig-1g.10gb"]),
)
def test_every_failed_node_has_a_named_reason(
    fill_seed: int, fill: float, cpu: int, memory_gib: int, gpu: str
) -> None:
    extender, cluster = make_extender("bestfit")
    cluster.fill(extender.policy, fill, seed=fill_seed)
    pod = pod_asking(gpu, cpu_milli=cpu, memory=f"{memory_gib}Gi")
    result = filter_result(extender, args(pod))
    feasible = cluster.state.feasible(pod_request(pod))
    expected = [name for name in NAMES if feasible[cluster.state.node_index[name]]]
    assert result.node_names == expected
    reasons = {**result.failed_nodes, **result.failed_and_unresolvable_nodes}
    assert sorted(reasons) == sorted(set(NAMES) - set(expected))
    assert all(reason.startswith("kubesage: ") for reason in reasons.values())


def test_prioritize_maps_names_afresh_when_the_node_set_changed() -> None:
    """prioritize may reuse filter's name → index mapping only for the same node set."""
    extender, cluster = make_extender()
    pod = gpu_pod("remap-0", gpus="1")
    passing = filter_result(extender, args(pod)).node_names
    assert passing
    before = priorities(extender, args(pod, passing))
    # The same nodes in reverse order: every name now sits at another index.
    with cluster.locked() as (state, _):
        cluster.state = ClusterState(list(reversed(state.nodes)))
    assert priorities(extender, args(pod, passing)) == before
    assert priorities(extender, args(pod, list(reversed(passing)))) == before


# -- prioritize reusing filter's outcome -------------------------------------------------


def fresh_priorities(cluster: EmbeddedCluster, body: bytes) -> dict[str, int]:
    """What an extender that never ran filter answers (its own policy, nothing cached)."""
    policy = make_policy("fgd", PolicyContext(seed=0, workload=tuple(cluster.workload)))
    return priorities(Extender(cluster, policy), body)


def test_prioritize_sees_a_change_to_a_passed_node_after_filter() -> None:
    """A pod accounted on a node between filter and prioritize (the watch, another
    scheduler) renews that node's stamp: filter's fit is not reused for it. (Reused,
    the full node would be scored and shift the min-max scale: h100-b would get 6.)"""
    extender, cluster = make_extender()
    pod = gpu_pod("reuse-0", gpus="2", cpu="2", memory="8Gi")
    passing = filter_result(extender, args(pod)).node_names
    assert passing == ["h100-a", "h100-b", "h100-small"]
    with cluster.locked() as (state, _):
        other = pod_request(gpu_pod("elsewhere", gpus="8", cpu="2", memory="8Gi"))
        node = state.node_index["h100-a"]
        state.allocate(other, state.placement(node, range(8), other))
    scores = priorities(extender, args(pod, passing))
    assert scores == {"h100-a": 0, "h100-b": 0, "h100-small": MAX_EXTENDER_PRIORITY}
    assert scores == fresh_priorities(cluster, args(pod, passing))


def test_prescored_scores_are_used_only_while_filters_nodes_are_unchanged() -> None:
    extender, cluster = make_extender()
    pod = gpu_pod("ahead-1", gpus="1", cpu="1", memory="1Gi")
    passing = filter_result(extender, args(pod)).node_names
    assert passing and "h100-a" in passing
    extender.prescore()
    assert priorities(extender, args(pod, passing)) == fresh_priorities(cluster, args(pod, passing))
    assert extender.prescores_used == 1
    # A node filter passed changes after the prescore: prioritize scores afresh.
    pod = gpu_pod("ahead-2", gpus="1", cpu="1", memory="1Gi")
    passing = filter_result(extender, args(pod)).node_names
    assert passing and "h100-a" in passing
    extender.prescore()
    with cluster.locked() as (state, _):
        other = pod_request(gpu_pod("elsewhere", gpus="4", cpu="2", memory="8Gi"))
        node = state.node_index["h100-a"]
        state.allocate(other, state.placement(node, range(4), other))
    assert priorities(extender, args(pod, passing)) == fresh_priorities(cluster, args(pod, passing))
    assert extender.prescores_used == 1


def test_prescoring_pauses_when_no_prioritize_follows_and_resumes_when_one_does() -> None:
    extender, cluster = make_extender()
    calls: list[int] = []
    score_nodes = extender.policy.score_nodes

    def counted(*arguments: Any) -> Any:
        calls.append(1)
        return score_nodes(*arguments)

    extender.policy.score_nodes = counted  # type: ignore[method-assign]
    for number in range(PRESCORES_UNUSED_LIMIT + 3):  # filter only: no prioritize verb
        pod = gpu_pod(f"only-filter-{number}", gpus="1", cpu="1", memory="1Gi")
        filter_result(extender, args(pod))
        extender.prescore()
    assert len(calls) == PRESCORES_UNUSED_LIMIT  # then it stopped scoring ahead
    pod = gpu_pod("both-verbs", gpus="1", cpu="1", memory="1Gi")
    passing = filter_result(extender, args(pod)).node_names
    extender.prescore()  # paused: scores nothing
    priorities(extender, args(pod, passing))  # prioritize follows filter again
    pod = gpu_pod("both-verbs-2", gpus="1", cpu="1", memory="1Gi")
    passing = filter_result(extender, args(pod)).node_names
    extender.prescore()
    used = extender.prescores_used
    assert priorities(extender, args(pod, passing)) == fresh_priorities(cluster, args(pod, passing))
    assert extender.prescores_used == used + 1


def test_prioritize_for_another_pod_or_version_does_not_reuse_filters_fit() -> None:
    extender, cluster = make_extender()
    small = gpu_pod("reuse-1", gpus="1", cpu="1", memory="1Gi")
    passing = filter_result(extender, args(small)).node_names
    assert {"h100-a", "h100-small"} <= set(passing)
    # Another pod (another uid) asked about filter's names: its own fit decides.
    big = gpu_pod("reuse-2", gpus="8")
    scores = priorities(extender, args(big, passing))
    assert scores["h100-small"] == 0
    assert scores == fresh_priorities(cluster, args(big, passing))
    # The same uid at a new resourceVersion asking for more: translated and fitted again.
    bigger = gpu_pod("reuse-1", gpus="8")
    bigger["metadata"] = {**small["metadata"], "resourceVersion": "99999"}
    scores = priorities(extender, args(bigger, passing))
    assert scores["h100-small"] == 0
    assert scores == fresh_priorities(cluster, args(bigger, passing))


@settings(max_examples=25, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["1", "2", "4", "8", "share"]),
            st.booleans(),  # bind the best node between filter and prioritize?
            st.booleans(),  # prioritize with filter's exact list, or every name?
            st.booleans(),  # prescore after filter, as the server does?
        ),
        min_size=1,
        max_size=12,
    )
)
def test_prioritize_answers_as_an_extender_without_caches_would(
    steps: list[tuple[str, bool, bool, bool]],
) -> None:
    """Whatever happens between filter and prioritize, the answer is the one computed
    from scratch on the state as it is then."""
    extender, cluster = make_extender()
    for number, (gpus, bind_between, exact, prescore) in enumerate(steps):
        annotations = {"kubesage.io/gpu-milli": "300"} if gpus == "share" else {}
        count = "1" if gpus == "share" else gpus
        pod = v1_pod(
            f"seq-{number}",
            containers=[
                v1_container(
                    requests={"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": count},
                    limits={"nvidia.com/gpu": count},
                )
            ],
            annotations=annotations,
        )
        passing = filter_result(extender, args(pod)).node_names
        assert passing is not None
        if not passing:
            continue
        names = passing if exact else NAMES
        if prescore:
            extender.prescore()
        if bind_between:
            scores = priorities(extender, args(pod, names))
            assert bind(extender, pod, max(scores, key=scores.__getitem__)) == ""
        assert priorities(extender, args(pod, names)) == fresh_priorities(cluster, args(pod, names))


@settings(max_examples=40, deadline=None)
@given(
    fill_seed=st.integers(0, 2**16),
    fill=st.floats(0.0, 0.9),
    cpu=st.integers(0, 70_000),
    gpu=st.sampled_from(["", "1", "4", "8", "share", "mig-3g.40gb", "mig-1g.10gb"]),
    picks=st.lists(st.integers(0, 49), min_size=1, max_size=12),
)
def test_fit_over_candidates_is_the_cluster_mask_at_those_nodes(
    fill_seed: int, fill: float, cpu: int, gpu: str, picks: list[int]
) -> None:
    """The candidates-only fit check (a dozen of 50 nodes) agrees with the core's."""
    nodes = [
        node_spec({**node, "metadata": {**node["metadata"], "name": f"{name}-{copy}"}})
        for copy in range(10)
        for node, name in zip(NODES, NAMES, strict=True)
    ]
    cluster = EmbeddedCluster(nodes, synthetic_workload(500, seed=0), "fifty nodes")
    policy = make_policy("bestfit", PolicyContext(seed=0, workload=tuple(cluster.workload)))
    cluster.fill(policy, fill, seed=fill_seed)
    request = pod_request(pod_asking(gpu, cpu_milli=cpu, memory="8Gi"))
    index = np.array(picks, dtype=np.int64)
    expected = cluster.state.feasible(request)[index]
    assert cluster.state.feasible(request, index).tolist() == expected.tolist()


def test_a_pod_asking_for_more_gpus_than_any_node_has_fails_every_known_node() -> None:
    extender, _ = make_extender()
    names = [node["metadata"]["name"] for node in NODES]
    result = filter_result(extender, args(gpu_pod("huge", gpus="65"), [*names, "new-node"]))
    assert result.node_names == ["new-node"]  # a node the state does not know passes on
    assert set(result.failed_and_unresolvable_nodes) == set(names)
    reason = next(iter(result.failed_and_unresolvable_nodes.values()))
    assert reason.startswith("kubesage: ") and "65 GPUs asked for" in reason
    assert "no node has more than 64" in reason
