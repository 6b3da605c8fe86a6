"""The loop binds a pod's MIG instance only once its node can start it.

A MIG re-layout labels its node with a mig-parted config; MIG Manager applies it and
reports ``nvidia.com/mig.config.state``, and the device plugin then advertises the new
instances. A bind before that is rejected by the kubelet at admission, so the loop's
bind actuator refuses it (the plan is retried on a later tick), and the label step
removes MIG Manager's report on the old config so that a stale ``success`` cannot let
a bind through early.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kubesage.core.k8s.actuators import live_actuators
from kubesage.core.k8s.binding import BindTarget
from kubesage.core.k8s.informer import ClusterSync
from kubesage.core.k8s.live_eligibility import LiveEligibility
from kubesage.core.k8s.mig_manager import MIG_CONFIG_LABEL, MIG_CONFIG_STATE_LABEL
from kubesage.core.k8s.mig_readiness import mig_wait
from kubesage.core.k8s.node_eligibility import EligibilityCache
from kubesage.core.k8s.node_labeler import LiveNodeLabeler
from kubesage.core.k8s.translate import pod_request
from kubesage.core.loop.actions import Bind, LabelNode, PodRef
from kubesage.core.loop.reconciler import Outcome
from kubesage.core.policy import PolicyContext, make_policy
from tests.core.k8s import running_sync, v1_container, v1_node, v1_pod
from tests.fakes.apiserver import FakeApiServer, wait_until

WHY = {"reconciler": "test", "explanation": "a test asked"}
SCHEDULER = "kubesage"
PROFILE = "nvidia.com/mig-3g.40gb"


def mig_pod(name: str = "infer", resource: str = PROFILE) -> dict[str, Any]:
    requests = {"cpu": "2", "memory": "4Gi", resource: "1"}
    return v1_pod(name, containers=[v1_container(requests=requests)], scheduler_name=SCHEDULER)


def mig_node(name: str = "mig-a", **labels: str) -> dict[str, Any]:
    return v1_node(
        name, gpus=1, product="NVIDIA-A100-SXM4-80GB", mig={"3g.40gb": 2}, extra_labels=labels
    )


def labelled(config: str | None, state: str | None) -> dict[str, str]:
    labels = {MIG_CONFIG_LABEL: config} if config else {}
    return labels | ({MIG_CONFIG_STATE_LABEL: state} if state else {})


@pytest.mark.parametrize(
    ("labels", "waits_for"),
    [
        (labelled("kubesage-aaaa1111", "pending"), "nvidia.com/mig.config.state=pending"),
        (labelled("kubesage-aaaa1111", "rebooting"), "nvidia.com/mig.config.state=rebooting"),
        # kubesage removed the old report when it set its config: MIG Manager's is awaited.
        (labelled("kubesage-aaaa1111", None), "no state reported yet"),
        (labelled("all-3g.40gb", "pending"), "nvidia.com/mig.config.state=pending"),
        (labelled("kubesage-aaaa1111", "success"), None),
        # An operator's config and no report at all: no MIG Manager runs there.
        (labelled("all-3g.40gb", None), None),
        (labelled(None, None), None),  # not managed by MIG Manager: no gate
    ],
)
def test_a_mig_pod_waits_until_mig_manager_applied_its_nodes_config(
    labels: dict[str, str], waits_for: str | None
) -> None:
    reason = mig_wait(mig_pod(), mig_node(**labels))
    if waits_for is None:
        assert reason is None
    else:
        assert reason is not None and waits_for in reason
        assert "MIG Manager has not applied node mig-a's MIG config" in reason
        assert "retried on a later tick" in reason


def test_a_failed_config_says_how_to_relabel_not_that_it_is_retried() -> None:
    # MIG Manager applies a config again only when the label changes.
    reason = mig_wait(mig_pod(), mig_node(**labelled("kubesage-aaaa1111", "failed")))
    assert reason is not None
    assert "MIG Manager failed to apply node mig-a's MIG config kubesage-aaaa1111" in reason
    assert "kubectl label node mig-a nvidia.com/mig.config-" in reason
    assert "retried on a later tick" not in reason


def test_a_mig_pod_waits_until_the_node_advertises_its_instance() -> None:
    ready = labelled("kubesage-aaaa1111", "success")
    reason = mig_wait(mig_pod(resource="nvidia.com/mig-1g.10gb"), mig_node(**ready))
    assert reason is not None
    assert "node mig-a does not advertise nvidia.com/mig-1g.10gb" in reason
    # Pods without a MIG resource (whole GPUs, DRA claims) are not this gate's.
    whole = v1_pod(containers=[v1_container(requests={"nvidia.com/gpu": "1"})])
    assert mig_wait(whole, mig_node(**labelled("kubesage-aaaa1111", "pending"))) is None


def test_the_secondary_scheduler_leaves_a_node_mid_relayout_alone_the_planners_do_not() -> None:
    # EligibilityCache is where the secondary scheduler (which binds what it places) and
    # the live collector (which tells the loop's planners where each pending pod may go)
    # read node filters from. A planner may re-lay out a node to create the instance.
    nodes = {
        "mig-a": mig_node("mig-a", **labelled("kubesage-aaaa1111", "pending")),
        "mig-b": mig_node("mig-b", **labelled("kubesage-bbbb2222", "success")),
    }
    binds = EligibilityCache(nodes, ["mig-a", "mig-b"], binds_now=True)
    mask = binds.eligible(mig_pod())
    assert mask is not None and mask.tolist() == [False, True]
    unadvertised = binds.eligible(mig_pod(resource="nvidia.com/mig-1g.10gb"))
    assert unadvertised is not None and not unadvertised.any()
    cpu_only = v1_pod(containers=[v1_container(requests={"cpu": "1"})])
    assert binds.eligible(cpu_only) is None  # every node: the gate is MIG instances' only
    # A whole GPU is another filter's: these all-MIG nodes advertise no nvidia.com/gpu.
    whole = binds.eligible(v1_pod(containers=[v1_container(requests={"nvidia.com/gpu": "1"})]))
    assert whole is not None and not whole.any()
    plans = EligibilityCache(nodes, ["mig-a", "mig-b"])
    assert plans.eligible(mig_pod()) is None
    assert plans.eligible(mig_pod(resource="nvidia.com/mig-1g.10gb")) is None


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        server.add_node(mig_node(**labelled("kubesage-aaaa1111", "pending")))
        yield server


@pytest.fixture
def sync(fake: FakeApiServer) -> Iterator[ClusterSync]:
    with running_sync(fake) as live:
        yield live


def test_the_loop_binds_a_mig_pod_once_mig_manager_reports_success(
    fake: FakeApiServer, sync: ClusterSync
) -> None:
    pod = fake.add_pod(mig_pod())
    wait_until(lambda: len(sync.pending_pods(SCHEDULER)) == 1, what="the pod seen")
    request = pod_request(pod)
    policy = make_policy("bestfit", PolicyContext())
    with sync.locked() as (state, _):
        placement = policy.decide(state, request).placement
        free_before = state.mig_free_compute.copy()
    assert placement is not None and placement.mig_start is not None
    metadata = pod["metadata"]
    bind = Bind(
        pod=PodRef(metadata["namespace"], metadata["name"], metadata["uid"]),
        request=request,
        placement=placement,
        **WHY,
    )
    actuator = live_actuators(fake.client(), sync, policy)[0]

    refused = actuator.execute(bind)
    assert refused.outcome is Outcome.REFUSED, refused.detail
    assert "nvidia.com/mig.config.state=pending" in refused.detail
    assert "nodeName" not in fake.pod("ml", "infer")["spec"]
    with sync.locked() as (state, _):
        assert (state.mig_free_compute == free_before).all()  # nothing assumed

    def applied(node: dict[str, Any]) -> None:
        node["metadata"]["labels"][MIG_CONFIG_STATE_LABEL] = "success"

    fake.modify_node("mig-a", applied)
    wait_until(
        lambda: sync.nodes()["mig-a"]["metadata"]["labels"][MIG_CONFIG_STATE_LABEL] == "success",
        what="the node's new state seen",
    )
    done = actuator.execute(bind)
    assert done.outcome is Outcome.DONE, done.detail
    assert fake.pod("ml", "infer")["spec"]["nodeName"] == "mig-a"


def test_a_new_config_label_removes_mig_managers_report_on_the_old_one(
    fake: FakeApiServer,
) -> None:
    def applied(node: dict[str, Any]) -> None:
        node["metadata"]["labels"][MIG_CONFIG_STATE_LABEL] = "success"

    fake.modify_node("mig-a", applied)
    labeler = LiveNodeLabeler(fake.client())
    # The stock config (no mig-parted to publish) keeps this test to the labels.
    step = LabelNode(node="mig-a", labels={MIG_CONFIG_LABEL: "all-3g.40gb"}, **WHY)

    result = labeler.execute(step)

    assert result.outcome is Outcome.DONE, result.detail
    labels = fake.node("mig-a")["metadata"]["labels"]
    assert labels[MIG_CONFIG_LABEL] == "all-3g.40gb"
    assert MIG_CONFIG_STATE_LABEL not in labels  # a success now is about the new config
    # MIG Manager applies it and reports; the same step again changes nothing.
    fake.modify_node("mig-a", applied)
    assert labeler.execute(step).outcome is Outcome.DONE
    assert fake.node("mig-a")["metadata"]["labels"][MIG_CONFIG_STATE_LABEL] == "success"


class StaleNodes:
    """A node cache that has not seen the loop's own label yet (NodeObjects)."""

    def __init__(self, node: dict[str, Any]) -> None:
        self._node = node

    def nodes(self) -> dict[str, dict[str, Any]]:
        return {"mig-a": self._node}


def test_the_bind_check_reads_the_node_from_the_api_server_not_a_stale_cache(
    fake: FakeApiServer,
) -> None:
    # A plan labels its node and binds to it in the same tick: the cache may still show
    # the old config's success while the API server already has the new label.
    pod = fake.add_pod(mig_pod())
    stale = mig_node(**labelled("all-3g.40gb", "success"))
    check = LiveEligibility(fake.client(), StaleNodes(stale))
    target = BindTarget(
        pod["metadata"]["namespace"], "infer", pod["metadata"]["uid"], "mig-a", pod_request(pod)
    )
    reason = check(target)
    assert reason is not None and "nvidia.com/mig.config.state=pending" in reason


def test_a_node_whose_mig_manager_is_busy_is_not_relabelled(fake: FakeApiServer) -> None:
    # The fixture's node is applying kubesage-aaaa1111 (pending): relabelling it now, its
    # report on that config could land after the removal and pass for the new one's.
    labeler = LiveNodeLabeler(fake.client())
    step = LabelNode(node="mig-a", labels={MIG_CONFIG_LABEL: "all-3g.40gb"}, **WHY)
    refused = labeler.execute(step)
    assert refused.outcome is Outcome.REFUSED, refused.detail
    assert "MIG Manager is still applying config kubesage-aaaa1111" in refused.detail
    labels = fake.node("mig-a")["metadata"]["labels"]
    assert labels[MIG_CONFIG_LABEL] == "kubesage-aaaa1111"
    assert labels[MIG_CONFIG_STATE_LABEL] == "pending"
