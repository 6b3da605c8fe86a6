"""Live actuators through the real kubernetes client against the fake API server:
eviction under PodDisruptionBudgets, Job / PyTorchJob scaling, patches, node labels."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from kubesage.core.annotations import GPU_INDICES_ANNOTATION
from kubesage.core.k8s.actuators import (
    LiveEvictor,
    LiveNodeLabeler,
    LivePatcher,
    live_actuators,
)
from kubesage.core.k8s.apiclient import ApiClient
from kubesage.core.k8s.binder import Binder
from kubesage.core.k8s.binding import BindActuator, assume_and_bind
from kubesage.core.k8s.embedded import EmbeddedCluster
from kubesage.core.loop.actions import (
    Bind,
    Evict,
    FlinkRescale,
    LabelNode,
    ObjectRef,
    Patch,
    PodRef,
    Scale,
)
from kubesage.core.loop.reconciler import Actuator, Outcome
from kubesage.core.policy import PolicyContext, make_policy
from kubesage.core.types import Placement
from tests.builders import node
from tests.builders import pod as pod_request
from tests.core.k8s import v1_container, v1_node, v1_pod
from tests.fakes.apiserver import FLINK_DEPLOYMENTS, PYTORCH_JOBS, FakeApiServer

WHY = {"reconciler": "test", "explanation": "a test asked"}
JOB = ObjectRef("batch/v1", "Job", "ml", "sweep")
PYTORCH_JOB = ObjectRef("kubeflow.org/v1", "PyTorchJob", "ml", "llama")
FLINK = ObjectRef("flink.apache.org/v1beta1", "FlinkDeployment", "ml", "wordcount")


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        server.add_node(v1_node("n1"))
        yield server


@pytest.fixture
def api(fake: FakeApiServer) -> ApiClient:
    return fake.client()


def running(name: str, *, app: str = "web", ready: bool = True) -> dict[str, Any]:
    """A pod bound to n1, Running, Ready (or not) — what a PDB counts."""
    pod = v1_pod(name)
    pod["metadata"]["labels"] = {"app": app}
    pod["spec"]["nodeName"] = "n1"
    pod["status"] = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
    }
    return pod


def budget(name: str = "web", *, app: str = "web", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"selector": {"matchLabels": {"app": app}}, **spec},
    }


def evict(api: ApiClient, name: str, uid: str = "") -> tuple[Outcome, str]:
    result = LiveEvictor(api).execute(Evict(pod=PodRef("ml", name, uid), **WHY))
    return result.outcome, result.detail


# -- eviction --------------------------------------------------------------------------------


def test_eviction_the_budget_allows_deletes_the_pod(fake: FakeApiServer, api: ApiClient) -> None:
    for name in ("web-0", "web-1"):
        fake.add_pod(running(name))
    assert fake.add_pdb(budget(minAvailable=1))["status"]["disruptionsAllowed"] == 1
    uid = fake.pod("ml", "web-0")["metadata"]["uid"]
    assert evict(api, "web-0", uid)[0] is Outcome.DONE
    assert [p["metadata"]["name"] for p in fake.pods()] == ["web-1"]
    status = fake.pdb("ml", "web")["status"]
    assert (status["currentHealthy"], status["disruptionsAllowed"]) == (1, 0)


def test_eviction_a_budget_forbids_is_refused_and_the_pod_stays(
    fake: FakeApiServer, api: ApiClient
) -> None:
    for name in ("web-0", "web-1"):
        fake.add_pod(running(name))
    fake.add_pdb(budget(minAvailable=2))
    outcome, detail = evict(api, "web-0")
    assert outcome is Outcome.REFUSED
    assert "would violate the pod's disruption budget" in detail
    assert "needs 2 healthy pods and has 2 currently" in detail
    assert fake.pod("ml", "web-0")["metadata"]["name"] == "web-0"
    (post,) = fake.requests_to("POST", r"/pods/web-0/eviction$")
    assert post.path == "/api/v1/namespaces/ml/pods/web-0/eviction"


def test_a_rehearsed_eviction_is_a_dry_run_that_answers_only_a_refusal(
    fake: FakeApiServer, api: ApiClient
) -> None:
    """``rehearse`` asks with ``?dryRun=All``: the budget's refusal comes back as the real
    eviction's would, and nothing is deleted or spent either way."""
    for name in ("web-0", "web-1"):
        fake.add_pod(running(name))
    fake.add_pdb(budget(minAvailable=1))
    evictor = LiveEvictor(api)
    action = Evict(pod=PodRef("ml", "web-0"), **WHY)
    assert evictor.rehearse(action) is None  # it would go through
    assert len(fake.pods()) == 2 and fake.pdb("ml", "web")["status"]["disruptionsAllowed"] == 1
    assert evict(api, "web-1")[0] is Outcome.DONE  # spends the one disruption allowed
    refused = evictor.rehearse(action)
    assert refused is not None and refused.outcome is Outcome.REFUSED
    assert "would violate the pod's disruption budget" in refused.detail
    assert [p["metadata"]["name"] for p in fake.pods()] == ["web-0"]
    posts = fake.requests_to("POST", r"/pods/web-0/eviction$")
    assert [post.query.get("dryRun") for post in posts] == [["All"], ["All"]]


def test_a_rehearsal_counts_what_the_plans_earlier_evictions_take_from_the_budget(
    fake: FakeApiServer, api: ApiClient
) -> None:
    """Two pods under one budget that allows one disruption: each dry run alone passes,
    but after the plan's first eviction the second would be refused, so the rehearsal
    refuses it and names the budget and the eviction that spends it."""
    for name in ("web-0", "web-1", "web-2"):
        fake.add_pod(running(name))
    fake.add_pod(running("db-0", app="db"))
    fake.add_pdb(budget(minAvailable=2))
    evictor = LiveEvictor(api)
    second = Evict(pod=PodRef("ml", "web-1"), **WHY)
    first = Evict(pod=PodRef("ml", "web-0"), **WHY)
    assert evictor.rehearse(second) is None  # alone, as the dry run sees it
    refused = evictor.rehearse(second, [first])
    assert refused is not None and refused.outcome is Outcome.REFUSED
    assert refused.detail == (
        "eviction of pod ml/web-1 would be refused: PodDisruptionBudget ml/web allows 1 "
        "disruption(s) now and the plan evicts 1 of its pods before this one (ml/web-0)"
    )
    # pods the budget does not cover, or that take nothing from it, leave it alone
    other = Evict(pod=PodRef("ml", "db-0"), **WHY)
    assert evictor.rehearse(second, [other]) is None
    assert len(fake.pods()) == 4  # nothing was evicted


def test_an_earlier_eviction_of_a_pod_that_is_not_ready_spends_nothing(
    fake: FakeApiServer, api: ApiClient
) -> None:
    fake.add_pod(running("web-0", ready=False))
    for name in ("web-1", "web-2"):
        fake.add_pod(running(name))
    fake.add_pdb(budget(minAvailable=1))  # two healthy, one disruption allowed
    evictor = LiveEvictor(api)
    first = Evict(pod=PodRef("ml", "web-0"), **WHY)
    assert evictor.rehearse(Evict(pod=PodRef("ml", "web-1"), **WHY), [first]) is None
    # as the API server spends it: the unready pod goes, the budget still allows one
    assert evict(api, "web-0")[0] is Outcome.DONE
    assert evict(api, "web-1")[0] is Outcome.DONE


def test_a_budget_still_being_processed_is_asked_again_not_refused(
    fake: FakeApiServer, api: ApiClient
) -> None:
    """A budget whose controller has not caught up with a change (observedGeneration
    behind): the API server says DisruptionBudget and asks to retry in 10 s. FAILED, so a
    later tick asks again; REFUSED would keep the pod from every plan for five minutes."""
    for name in ("web-0", "web-1"):
        fake.add_pod(running(name))
    fake.add_pdb(budget(minAvailable=1))
    fake.budget_lags("ml", "web")
    outcome, detail = evict(api, "web-0")
    assert outcome is Outcome.FAILED
    assert "is still being processed by the server" in detail and "retry after 10 s" in detail
    assert len(fake.pods()) == 2


def test_a_throttled_eviction_is_a_failure_not_a_budget_refusal(
    fake: FakeApiServer, api: ApiClient
) -> None:
    # A 429 without a DisruptionBudget cause is the API server throttling (API Priority
    # and Fairness): an error a later tick retries, with the wait it asked for.
    fake.add_pod(running("web-0"))
    fake.fail("POST", r"/pods/web-0/eviction$", 429, message="Too many requests", retry_after_s=3)
    outcome, detail = evict(api, "web-0")
    assert outcome is Outcome.FAILED
    assert "throttled: Too many requests" in detail and "retry after 3 s" in detail
    assert fake.pod("ml", "web-0")["metadata"]["name"] == "web-0"


def test_second_eviction_meets_the_spent_budget(fake: FakeApiServer, api: ApiClient) -> None:
    for name in ("web-0", "web-1", "web-2"):
        fake.add_pod(running(name))
    fake.add_pdb(budget(maxUnavailable="34%"))  # of 3, rounded up: 2 may go
    outcomes = [evict(api, name)[0] for name in ("web-0", "web-1", "web-2")]
    assert outcomes == [Outcome.DONE, Outcome.DONE, Outcome.REFUSED]


def test_the_api_reports_budget_status_in_its_real_shape(
    fake: FakeApiServer, api: ApiClient
) -> None:
    fake.add_pod(running("web-0"))
    fake.add_pod(running("web-1", ready=False))
    fake.add_pdb(budget(minAvailable="50%"))
    read = k8s.PolicyV1Api(api).read_namespaced_pod_disruption_budget("web", "ml")
    assert read.status is not None
    assert (read.status.expected_pods, read.status.current_healthy) == (2, 1)
    assert (read.status.desired_healthy, read.status.disruptions_allowed) == (1, 0)
    assert read.status.conditions[0].reason == "InsufficientPods"


@pytest.mark.parametrize(
    ("policy", "expected"), [(None, Outcome.REFUSED), ("AlwaysAllow", Outcome.DONE)]
)
def test_an_unready_pod_under_a_spent_budget(
    fake: FakeApiServer, api: ApiClient, policy: str | None, expected: Outcome
) -> None:
    fake.add_pod(running("web-0"))
    fake.add_pod(running("web-1", ready=False))
    extra = {"unhealthyPodEvictionPolicy": policy} if policy else {}
    fake.add_pdb(budget(minAvailable=2, **extra))
    assert evict(api, "web-1")[0] is expected


def test_a_pending_pod_ignores_budgets(fake: FakeApiServer, api: ApiClient) -> None:
    pending = v1_pod("web-0")
    pending["metadata"]["labels"] = {"app": "web"}
    fake.add_pod(pending)
    fake.add_pdb(budget(minAvailable=5))
    assert evict(api, "web-0")[0] is Outcome.DONE


@pytest.mark.parametrize(
    ("setup", "expected", "words"),
    [
        ("gone", Outcome.DONE, "already gone"),
        ("replaced", Outcome.REFUSED, "Precondition failed"),
        ("two-budgets", Outcome.FAILED, "more than one PodDisruptionBudget"),
        ("unavailable", Outcome.FAILED, "HTTP 503"),
    ],
)
def test_eviction_answers_map_to_outcomes(
    fake: FakeApiServer, api: ApiClient, setup: str, expected: Outcome, words: str
) -> None:
    uid = ""
    if setup == "replaced":
        fake.add_pod(running("web-0"))
        uid = "not-the-uid-of-web-0"
    if setup == "two-budgets":
        fake.add_pod(running("web-0"))
        fake.add_pdb(budget("a", minAvailable=0))
        fake.add_pdb(budget("b", maxUnavailable=1))
    if setup == "unavailable":
        fake.add_pod(running("web-0"))
        fake.fail("POST", r"/eviction$", 503)
    outcome, detail = evict(api, "web-0", uid)
    assert (outcome, words in detail) == (expected, True), detail
    if setup != "gone":
        assert fake.pod("ml", "web-0")  # nothing was deleted


# -- scale and patch -------------------------------------------------------------------------


def job(parallelism: int = 4) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "sweep", "namespace": "ml"},
        "spec": {
            "parallelism": parallelism,
            "completions": 16,
            "template": {
                "spec": {"containers": [v1_container()], "restartPolicy": "Never"},
            },
        },
    }


def pytorch_job(elastic: dict[str, int] | None, workers: int = 4) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "pytorchReplicaSpecs": {
            "Worker": {"replicas": workers, "restartPolicy": "OnFailure", "template": {}}
        }
    }
    if elastic is not None:
        spec["elasticPolicy"] = {"rdzvBackend": "c10d", **elastic}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "llama", "namespace": "ml"},
        "spec": spec,
    }


def scale(api: ApiClient, ref: ObjectRef, replicas: int) -> tuple[Outcome, str]:
    result = LivePatcher(api).execute(Scale(workload=ref, replicas=replicas, **WHY))
    return result.outcome, result.detail


@pytest.mark.parametrize(("replicas", "expected"), [(0, Outcome.DONE), (8, Outcome.DONE)])
def test_job_parallelism_is_merge_patched(
    fake: FakeApiServer, api: ApiClient, replicas: int, expected: Outcome
) -> None:
    fake.add_job(job())
    assert scale(api, JOB, replicas)[0] is expected
    stored = fake.job("ml", "sweep")
    assert stored["spec"] == {**job()["spec"], "parallelism": replicas}
    assert stored["metadata"]["generation"] == 2
    (patch,) = fake.requests_to("PATCH", r"/jobs/sweep$")
    assert patch.path == "/apis/batch/v1/namespaces/ml/jobs/sweep"


def test_job_scale_refusals(fake: FakeApiServer, api: ApiClient) -> None:
    assert scale(api, JOB, 2)[0] is Outcome.REFUSED  # no such Job: 404
    fake.add_job(job())
    outcome, detail = scale(api, JOB, -1)
    assert (outcome, "≥ 0" in detail) == (Outcome.REFUSED, True)
    assert fake.job("ml", "sweep")["spec"]["parallelism"] == 4


@pytest.mark.parametrize(
    ("elastic", "replicas", "expected", "words"),
    [
        ({"minReplicas": 2, "maxReplicas": 8}, 2, Outcome.DONE, "applied"),
        ({"minReplicas": 2, "maxReplicas": 8}, 8, Outcome.DONE, "applied"),
        ({"minReplicas": 2, "maxReplicas": 8}, 1, Outcome.REFUSED, "bounds [2, 8]"),
        ({"minReplicas": 2, "maxReplicas": 8}, 9, Outcome.REFUSED, "bounds [2, 8]"),
        ({"maxReplicas": 8}, 0, Outcome.REFUSED, "bounds [1, 8]"),
        (None, 2, Outcome.REFUSED, "no spec.elasticPolicy"),
    ],
)
def test_pytorch_job_elastic_replicas_within_bounds(
    fake: FakeApiServer,
    api: ApiClient,
    elastic: dict[str, int] | None,
    replicas: int,
    expected: Outcome,
    words: str,
) -> None:
    fake.add_custom(PYTORCH_JOBS, pytorch_job(elastic))
    outcome, detail = scale(api, PYTORCH_JOB, replicas)
    assert (outcome, words in detail) == (expected, True), detail
    stored = fake.get(PYTORCH_JOBS, "ml", "llama")["spec"]["pytorchReplicaSpecs"]["Worker"]
    assert stored["replicas"] == (replicas if expected is Outcome.DONE else 4)
    assert stored["restartPolicy"] == "OnFailure"  # a merge patch keeps the rest


def test_a_patch_on_a_changed_object_is_refused(fake: FakeApiServer, api: ApiClient) -> None:
    read = fake.add_custom(PYTORCH_JOBS, pytorch_job({"minReplicas": 1, "maxReplicas": 4}))
    stale = read["metadata"]["resourceVersion"]
    fake.modify(PYTORCH_JOBS, "ml", "llama", lambda job: job["metadata"].update(labels={"a": "b"}))
    patch = {"metadata": {"resourceVersion": stale}, "spec": {"runPolicy": {"suspend": True}}}
    result = LivePatcher(api).execute(Patch(obj=PYTORCH_JOB, patch=patch, **WHY))
    assert result.outcome is Outcome.REFUSED
    assert "has been modified" in result.detail


def test_flink_deployment_overrides_are_merged(fake: FakeApiServer, api: ApiClient) -> None:
    fake.add_custom(
        FLINK_DEPLOYMENTS,
        {
            "metadata": {"name": "wordcount", "namespace": "ml"},
            "spec": {"flinkConfiguration": {"taskmanager.numberOfTaskSlots": "2"}},
        },
    )
    overrides = {"pipeline.jobvertex-parallelism-overrides": "a" * 32 + ":4"}
    patch = {"spec": {"flinkConfiguration": overrides}}
    result = LivePatcher(api).execute(Patch(obj=FLINK, patch=patch, **WHY))
    assert result.outcome is Outcome.DONE
    stored = fake.get(FLINK_DEPLOYMENTS, "ml", "wordcount")["spec"]["flinkConfiguration"]
    assert stored == {"taskmanager.numberOfTaskSlots": "2", **overrides}


def test_kinds_without_rbac_are_refused_before_any_request(
    fake: FakeApiServer, api: ApiClient
) -> None:
    deployment = ObjectRef("apps/v1", "Deployment", "ml", "web")
    result = LivePatcher(api).execute(Patch(obj=deployment, patch={"spec": {}}, **WHY))
    assert result.outcome is Outcome.REFUSED
    assert "patches only" in result.detail
    assert not fake.requests_to("PATCH", ".")


def test_patch_errors_are_failures(fake: FakeApiServer, api: ApiClient) -> None:
    fake.add_job(job())
    fake.fail("PATCH", r"/jobs/sweep$", 500)
    assert scale(api, JOB, 2)[0] is Outcome.FAILED


# -- node labels and binding ---------------------------------------------------------------


def test_node_labels_are_set_and_removed(fake: FakeApiServer, api: ApiClient) -> None:
    labeler = LiveNodeLabeler(api)
    set_label = LabelNode(node="n1", labels={"nvidia.com/mig.config": "all-1g.10gb"}, **WHY)
    assert labeler.execute(set_label).outcome is Outcome.DONE
    assert fake.node("n1")["metadata"]["labels"]["nvidia.com/mig.config"] == "all-1g.10gb"
    remove = LabelNode(node="n1", labels={"nvidia.com/mig.config": None}, **WHY)
    result = labeler.execute(remove)
    assert (result.outcome, result.detail) == (
        Outcome.DONE,
        "node/n1 labelled nvidia.com/mig.config-",
    )
    labels = fake.node("n1")["metadata"]["labels"]
    assert "nvidia.com/mig.config" not in labels
    assert labels["kubernetes.io/hostname"] == "n1"  # the others stay
    assert labeler.execute(LabelNode(node="n9", labels={"a": "b"}, **WHY)).outcome is (
        Outcome.REFUSED
    )


def test_bind_honours_the_placement_posts_its_annotations_and_accounts_it_first(
    fake: FakeApiServer, api: ApiClient
) -> None:
    uid = fake.add_pod(v1_pod("trainer", scheduler_name="kubesage"))["metadata"]["uid"]
    # The accounting side of the one bind path: a real ClusterState behind a lock.
    view = EmbeddedCluster([node("n1", gpus=8)], [], "one node")
    policy = make_policy("bestfit", PolicyContext())
    binder = BindActuator(assume_and_bind(view, Binder(api, attempts=1), policy))
    placement = Placement(node="n1", node_index=0, gpu_milli_by_index=((5, 1000), (2, 1000)))
    action = Bind(
        pod=PodRef("ml", "trainer", uid),
        request=pod_request("trainer", gpus=2),
        placement=placement,
        annotations={"kubesage.io/gang-rank": "0"},
        **WHY,
    )
    result = binder.execute(action)
    assert result.outcome is Outcome.DONE, result.detail
    stored = fake.pod("ml", "trainer")
    assert stored["spec"]["nodeName"] == "n1"
    annotations = stored["metadata"]["annotations"]
    assert annotations[GPU_INDICES_ANNOTATION] == "5,2"  # the ring order, not the policy's
    assert annotations["kubesage.io/gang-rank"] == "0"
    with view.locked() as (state, _):
        assert state.gpu_free_milli[0, [2, 5]].tolist() == [0, 0]
        free_after_bind = state.gpu_free_milli.copy()

    # A pod that is gone is refused, and its accounting undone.
    gone = Bind(
        pod=PodRef("ml", "nobody"),
        request=pod_request("nobody", gpus=1),
        placement=Placement(node="n1", node_index=0, gpu_milli_by_index=((0, 1000),)),
        **WHY,
    )
    assert binder.execute(gone).outcome is Outcome.REFUSED
    # A placement on GPUs that are taken is refused before anything is posted.
    taken = Bind(
        pod=PodRef("ml", "late"),
        request=pod_request("late", gpus=1),
        placement=Placement(node="n1", node_index=0, gpu_milli_by_index=((5, 1000),)),
        **WHY,
    )
    refused = binder.execute(taken)
    assert refused.outcome is Outcome.REFUSED and "GPU 5 on n1 has 0 milli free" in refused.detail
    with view.locked() as (state, _):
        assert (state.gpu_free_milli == free_after_bind).all()


def test_live_actuators_cover_each_kind_once_and_leave_flink_to_its_adapter(
    api: ApiClient,
) -> None:
    view = EmbeddedCluster([node("n1")], [], "one node")
    actuators = live_actuators(api, view, make_policy("bestfit", PolicyContext()))
    assert all(isinstance(actuator, Actuator) for actuator in actuators)
    kinds = [kind for actuator in actuators for kind in actuator.kinds]
    assert len(kinds) == len(set(kinds))
    assert {str(kind) for kind in kinds} == {"bind", "evict", "scale", "patch", "label-node"}
    rescale = FlinkRescale(jobmanager="http://jm:8081", job_id="j", parallelism={}, **WHY)
    assert all(rescale.kind not in actuator.kinds for actuator in actuators)


# -- an evicted pod's replacement ------------------------------------------------------------

OWNER = ObjectRef("apps/v1", "ReplicaSet", "ml", "web-5d8f")


def owned(name: str, *, owner: str = "web-5d8f", gpus: str = "1") -> dict[str, Any]:
    """A pending pod of ReplicaSet ``owner`` asking for ``gpus`` GPUs, as its controller
    creates it."""
    requests = {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": gpus}
    pod = v1_pod(name, containers=[v1_container(requests=requests)], scheduler_name="kubesage")
    reference = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": owner, "uid": "rs-uid"}
    pod["metadata"]["ownerReferences"] = [{**reference, "controller": True}]
    return pod


def rebind(gpu: int, *, owner: ObjectRef | None = OWNER) -> Bind:
    """A plan's re-placement of ``ml/web-old`` (evicted: gone from the API) on n1 GPU ``gpu``."""
    request = pod_request("ml/web-old", cpu=2000, memory=4096, gpus=1)
    request = request.model_copy(update={"qos": "Burstable", "priority": 0})
    return Bind(
        pod=PodRef("ml", "web-old", "uid-of-the-evicted-pod"),
        request=request,
        placement=Placement(node="n1", node_index=0, gpu_milli_by_index=((gpu, 1000),)),
        owner=owner,
        **WHY,
    )


def test_a_bind_whose_pod_is_gone_binds_its_owners_pending_replacement(
    fake: FakeApiServer, api: ApiClient
) -> None:
    fake.add_pod(owned("web-other", owner="another-rs"))  # not the owner
    fake.add_pod(owned("web-big", gpus="2"))  # not the request shape
    fake.add_pod(owned("web-x7k2q"))
    fake.add_pod(owned("web-p9d4m"))
    view = EmbeddedCluster([node("n1", gpus=8)], [], "one node")
    binder = live_actuators(api, view, make_policy("bestfit", PolicyContext()))[0]
    first = binder.execute(rebind(3))
    assert first.outcome is Outcome.DONE, first.detail
    assert "its replacement ml/web-p9d4m" in first.detail  # the oldest: names break the tie
    assert fake.pod("ml", "web-p9d4m")["spec"]["nodeName"] == "n1"
    assert fake.pod("ml", "web-p9d4m")["metadata"]["annotations"][GPU_INDICES_ANNOTATION] == "3"
    # A second step re-placing another evicted pod of the owner takes the other one.
    second = binder.execute(rebind(4))
    assert (second.outcome, "ml/web-x7k2q" in second.detail) == (Outcome.DONE, True)
    for name in ("web-other", "web-big"):
        assert "nodeName" not in fake.pod("ml", name)["spec"]
    # None left: refused with the reason, nothing accounted.
    third = binder.execute(rebind(5))
    assert third.outcome is Outcome.REFUSED
    assert "no pending replacement with the same request yet" in third.detail
    # Without an owner a gone pod is simply refused (the Binder's 404).
    assert binder.execute(rebind(5, owner=None)).outcome is Outcome.REFUSED
    with view.locked() as (state, _):
        assert state.gpu_free_milli[0].tolist() == [1000] * 3 + [0, 0] + [1000] * 3


def test_a_bind_with_an_owner_binds_its_own_pod_while_it_is_there(
    fake: FakeApiServer, api: ApiClient
) -> None:
    uid = fake.add_pod(owned("web-old"))["metadata"]["uid"]
    fake.add_pod(owned("web-x7k2q"))
    view = EmbeddedCluster([node("n1", gpus=8)], [], "one node")
    binder = live_actuators(api, view, make_policy("bestfit", PolicyContext()))[0]
    fake.fail("GET", r"/pods/web-old$", 503)
    failed = binder.execute(rebind(1))
    assert failed.outcome is Outcome.FAILED and "HTTP 503" in failed.detail
    own = dataclasses.replace(rebind(0), pod=PodRef("ml", "web-old", uid))
    assert binder.execute(own).outcome is Outcome.DONE
    assert fake.pod("ml", "web-old")["spec"]["nodeName"] == "n1"
    assert "nodeName" not in fake.pod("ml", "web-x7k2q")["spec"]
