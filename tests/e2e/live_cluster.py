"""A live cluster path for the control loop's end-to-end tests.

The FAKE API server (:mod:`tests.fakes.apiserver`, real HTTP) stands in for the cluster;
everything above it is what ``kubesage serve`` runs: the real ``kubernetes`` client, a
:class:`~kubesage.core.k8s.informer.ClusterSync`, a shared
:class:`~kubesage.core.k8s.binder.Binder`, the loop built by
:func:`kubesage.core.cli.loop.live_loop` (installed adapters' reconcilers and the
core's, the live actuators) and the secondary scheduler deferring to it through
:func:`~kubesage.core.cli.loop.loop_claims`. The loop runs on a simulated clock the
tests advance one tick at a time.

The fake runs no controllers; :class:`ReplicaSetController` and
:class:`TrainingOperator` play the two the tests need.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from kubesage.core.annotations import GPU_INDICES_ANNOTATION, GPU_MILLI_ANNOTATION
from kubesage.core.cli.loop import live_loop, loop_claims
from kubesage.core.k8s.apiclient import ApiClient, load_api_client
from kubesage.core.k8s.binder import Binder
from kubesage.core.k8s.informer import ClusterSync
from kubesage.core.k8s.secondary import SecondaryScheduler
from kubesage.core.loop.clock import SimulatedClock
from kubesage.core.loop.control import ControlLoop
from kubesage.core.loop.report import TickReport
from kubesage.core.loop.settings import LoopSettings
from kubesage.core.perception import Collector
from kubesage.core.policy import PolicyContext, make_policy
from kubesage.core.traces.synthetic import synthetic_workload
from tests.core.k8s import v1_container, v1_node, v1_pod
from tests.fakes.apiserver import PYTORCH_JOBS, FakeApiServer, wait_until

Obj = dict[str, Any]

SCHEDULER = "kubesage"
"""kubesage's schedulerName (``kubesage serve --scheduler-name``)."""
DEFAULT_SCHEDULER = "default-scheduler"
POLICY = "fgd"
WORKLOAD = tuple(synthetic_workload(2000, seed=0))
"""The typical pods FGD measures fragmentation against (``serve`` uses openb's mix)."""
H100 = "NVIDIA-H100-80GB-HBM3"
NAMESPACE = "ml"


def owner_reference(kind: str, name: str, api_version: str) -> Obj:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{kind}/{name}")),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def gpu_pod(
    name: str,
    *,
    gpus: int = 1,
    milli: int | None = None,
    qos: str = "Burstable",
    node: str | None = None,
    gpu_indices: str | None = None,
    owner: Obj | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    scheduler: str = SCHEDULER,
    cpu: str = "2",
    memory: str = "8Gi",
    product: str | None = None,
) -> Obj:
    """A v1 Pod asking for ``gpus`` whole GPUs (or ``milli`` of one), of ``qos``:
    BestEffort asks no CPU or memory, Guaranteed sets limits equal to its requests.
    With ``node`` it is bound there, Running and Ready, on ``gpu_indices``."""
    requests = {"nvidia.com/gpu": str(gpus)}
    if qos != "BestEffort":
        requests |= {"cpu": cpu, "memory": memory}
    limits = dict(requests) if qos == "Guaranteed" else {"nvidia.com/gpu": str(gpus)}
    notes = dict(annotations or {})
    if milli is not None:
        notes[GPU_MILLI_ANNOTATION] = str(milli)
    pod = v1_pod(
        name,
        containers=[v1_container(requests=requests, limits=limits)],
        annotations=notes,
        node_selector={"nvidia.com/gpu.product": product} if product else None,
        scheduler_name=scheduler,
    )
    metadata = pod["metadata"]
    metadata["uid"] = str(uuid.uuid4())
    metadata["labels"] = dict(labels or {"app": name})
    if owner is not None:
        metadata["ownerReferences"] = [owner]
    pod["status"]["qosClass"] = qos
    if node is not None:
        pod["spec"]["nodeName"] = node
        metadata["annotations"][GPU_INDICES_ANNOTATION] = gpu_indices or "0"
        pod["status"] |= {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
        }
    return pod


class LiveCluster:
    """The fake API server with a ClusterSync, a Binder and a simulated clock on it."""

    def __init__(self, nodes: list[Obj]) -> None:
        self.fake = FakeApiServer().start()
        for node in nodes:
            self.fake.add_node(node)
        api = load_api_client(str(self.fake.kubeconfig))
        assert api is not None
        self.api: ApiClient = api
        self.sync = ClusterSync(api, backoff_s=0.02, max_backoff_s=0.1)
        self.binder = Binder(api, attempts=3, backoff_s=0.01, max_backoff_s=0.02)
        # The ClusterSync stamps its snapshots with the wall clock: start there.
        self.clock = SimulatedClock(time.time())

    def start(self) -> LiveCluster:
        self.sync.start()
        assert self.sync.wait_until_ready(10), "the ClusterSync did not list the fake"
        return self

    def stop(self) -> None:
        self.sync.stop()
        self.fake.stop()

    # -- what kubesage serve builds ----------------------------------------------------------

    def loop(
        self,
        settings: LoopSettings,
        *,
        wall_clock: bool = False,
        collectors: Sequence[Collector[Any]] = (),
    ) -> ControlLoop:
        """The loop exactly as ``kubesage serve`` builds it (reconcilers=None: the
        installed adapters' and the core's), on the simulated clock (or serve's own
        wall clock)."""
        return live_loop(
            self.api,
            self.sync,
            POLICY,
            WORKLOAD,
            settings,
            binder=self.binder,
            scheduler_name=SCHEDULER,
            clock=None if wall_clock else self.clock,
            reconcilers=None,
            collectors=collectors,
        )

    def secondary(self, control: ControlLoop) -> SecondaryScheduler:
        """The secondary scheduler beside the loop, leaving it the gangs it claims."""
        return SecondaryScheduler(
            self.api,
            self.sync,
            make_policy(POLICY, PolicyContext(seed=0, workload=WORKLOAD)),
            scheduler_name=SCHEDULER,
            binder=self.binder,
            defer=loop_claims(control),
        )

    def tick(self, control: ControlLoop) -> TickReport:
        """One tick, after the ClusterSync has caught up with the API server and one
        tick's time has passed."""
        self.settle()
        self.clock.advance(control.tick_s)
        return control.tick()

    def settle(self) -> None:
        """Wait until the ClusterSync's pods are the API server's (node, or pending)."""

        def seen() -> dict[str, str]:
            pods = list(self.sync.bound_pods())
            for scheduler in (DEFAULT_SCHEDULER, SCHEDULER):
                pods += self.sync.pending_pods(scheduler)
            return {p["metadata"]["uid"]: p["spec"].get("nodeName") or "" for p in pods}

        def stored() -> dict[str, str]:
            return {
                p["metadata"]["uid"]: p["spec"].get("nodeName") or ""
                for p in self.fake.pods()
                if p["status"].get("phase") not in ("Succeeded", "Failed")
            }

        wait_until(lambda: seen() == stored(), what="the ClusterSync to see every pod")

    # -- reading the cluster back --------------------------------------------------------------

    def pod(self, name: str) -> Obj:
        return self.fake.pod(NAMESPACE, name)

    def node_of(self, name: str) -> str | None:
        node = self.pod(name)["spec"].get("nodeName")
        return str(node) if node else None

    def gpus_of(self, name: str) -> str:
        return str(self.pod(name)["metadata"].get("annotations", {}).get(GPU_INDICES_ANNOTATION))

    def owned_by(self, owner: str) -> list[Obj]:
        return [
            pod
            for pod in self.fake.pods()
            if any(ref["name"] == owner for ref in pod["metadata"].get("ownerReferences") or [])
        ]

    def evicted(self) -> list[str]:
        """Names of the pods an eviction was posted for, in order."""
        return [r.path.split("/")[-2] for r in self.fake.requests_to("POST", r"/eviction$")]


def cluster(nodes: list[Obj], pods: Iterable[Obj] = ()) -> Iterator[LiveCluster]:
    """A started :class:`LiveCluster` with ``pods`` (for a fixture), stopped after."""
    live = LiveCluster(nodes)
    for pod in pods:
        live.fake.add_pod(pod)
    live.start()
    try:
        yield live
    finally:
        live.stop()


def dgx_node(name: str) -> Obj:
    """A DGX H100 as its Node object shows it (8 GPUs, 224 CPUs, 2 TiB)."""
    return v1_node(name, cpu="224", memory="2Ti", gpus=8, product=H100)


def audit(path: Path) -> list[Obj]:
    """The audit log's records (JSON lines)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class ReplicaSetController:
    """Plays the ReplicaSet controller: a deleted pod of a ReplicaSet is replaced at once
    by a new pending pod, ``<owner>-<suffix>``, with the same labels, owner and spec."""

    def __init__(self, fake: FakeApiServer) -> None:
        self.fake = fake
        self.created: list[str] = []
        fake.on_pod_deleted(self._replace)

    def _replace(self, pod: Obj) -> None:
        owners = [
            r for r in pod["metadata"].get("ownerReferences") or [] if r["kind"] == "ReplicaSet"
        ]
        if not owners:
            return
        name = f"{owners[0]['name']}-{uuid.uuid4().hex[:5]}"
        spec = {k: v for k, v in pod["spec"].items() if k != "nodeName"}
        annotations = dict(pod["metadata"].get("annotations") or {})
        annotations.pop(GPU_INDICES_ANNOTATION, None)
        replacement = {
            "metadata": {
                "name": name,
                "namespace": pod["metadata"]["namespace"],
                "labels": dict(pod["metadata"].get("labels") or {}),
                "annotations": annotations,
                "ownerReferences": owners,
            },
            "spec": spec,
            "status": {"phase": "Pending", "qosClass": pod["status"].get("qosClass")},
        }
        self.fake.add_pod(replacement)
        self.created.append(name)


class TrainingOperator:
    """Plays the Kubeflow training operator for one PyTorchJob: its Worker pods follow
    ``spec.pytorchReplicaSpecs.Worker.replicas`` (new workers pending, the highest
    indices deleted first)."""

    def __init__(self, fake: FakeApiServer, job: Obj, worker: Obj) -> None:
        self.fake = fake
        self.name = job["metadata"]["name"]
        self.worker = worker
        """A pending worker pod: the template of new ones (``-worker-<i>``)."""
        fake.add_custom(PYTORCH_JOBS, job)

    @property
    def replicas(self) -> int:
        job = self.fake.get(PYTORCH_JOBS, NAMESPACE, self.name)
        return int(job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"])

    def workers(self) -> list[Obj]:
        prefix = f"{self.name}-worker-"
        pods = [p for p in self.fake.pods() if p["metadata"]["name"].startswith(prefix)]
        return sorted(pods, key=lambda p: int(p["metadata"]["name"].removeprefix(prefix)))

    def reconcile(self) -> None:
        workers = self.workers()
        for pod in workers[self.replicas :]:
            self.fake.delete_pod(NAMESPACE, pod["metadata"]["name"])
        for index in range(len(workers), self.replicas):
            pod = json.loads(json.dumps(self.worker))
            pod["metadata"] |= {"name": f"{self.name}-worker-{index}", "uid": str(uuid.uuid4())}
            pod["metadata"]["labels"]["training.kubeflow.org/replica-index"] = str(index)
            self.fake.add_pod(pod)


# -- the fragmented cluster ----------------------------------------------------------------
#
# n1 and n2 have two H100s each, every GPU half taken by a GPU-sharing pod of its own
# ReplicaSet: share-a (BestEffort) and share-b (Burstable) on n1, share-c and share-d
# (Guaranteed) on n2. n3's two A100s are empty, but the waiting pod (one whole H100,
# a Job's) may not use them: it is pending only because the H100 sharing pods are
# scattered. Moving share-a's pod (the cheapest: best-effort) next to share-b's frees
# n1's GPU 0.

SHARING = {
    "share-a": ("BestEffort", "n1", "0"),
    "share-b": ("Burstable", "n1", "1"),
    "share-c": ("Guaranteed", "n2", "0"),
    "share-d": ("Guaranteed", "n2", "1"),
}


def scatter(live: LiveCluster) -> None:
    """The sharing pods (``<owner>-0``) and the waiting pod ``train-0``."""
    for owner, (qos, node, gpu) in SHARING.items():
        reference = owner_reference("ReplicaSet", owner, "apps/v1")
        live.fake.add_pod(
            gpu_pod(
                f"{owner}-0",
                milli=500,
                qos=qos,
                node=node,
                gpu_indices=gpu,
                owner=reference,
                labels={"app": owner, "tier": "sharing"},
            )
        )
    job = owner_reference("Job", "train", "batch/v1")
    live.fake.add_pod(gpu_pod("train-0", qos="Guaranteed", owner=job, product=H100))


def sharing_budget(live: LiveCluster, selector: dict[str, str], **spec: Any) -> None:
    live.fake.add_pdb(
        {
            "metadata": {"name": "sharing", "namespace": "ml"},
            "spec": {"selector": {"matchLabels": selector}, **spec},
        }
    )


def run_until_bound(
    live: LiveCluster, control: ControlLoop, secondary: SecondaryScheduler, ticks: int
) -> int:
    """Tick until ``train-0`` is bound (at most ``ticks``), the secondary scheduler
    running between ticks; how many ticks it took."""
    for tick in range(1, ticks + 1):
        live.tick(control)
        live.settle()
        secondary.schedule_once()
        if live.node_of("train-0") is not None:
            return tick
    return ticks + 1


def assert_no_pod_lost(live: LiveCluster) -> None:
    """Every ReplicaSet has its one pod, bound; the Guaranteed ones never moved."""
    for owner, (qos, node, gpu) in SHARING.items():
        (pod,) = live.owned_by(owner)
        assert pod["spec"].get("nodeName"), f"{owner}'s pod is pending"
        if qos == "Guaranteed":
            assert pod["metadata"]["name"] == f"{owner}-0"
            assert (live.node_of(f"{owner}-0"), live.gpus_of(f"{owner}-0")) == (node, gpu)


# -- the elastic training job ----------------------------------------------------------------
#
# PyTorchJob ml/llama runs two 4-GPU workers (elastic 1..2), one on each of two 4-GPU
# nodes, n1 and n2 (GPUs 0-3); the TrainingOperator plays its operator.

ELASTIC = {"kubesage.io/elastic-min": "1", "kubesage.io/elastic-max": "2"}
WORKER_LABELS = {"app": "llama", "training.kubeflow.org/replica-type": "worker"}


def pytorch_job(
    live: LiveCluster, *, annotations: dict[str, str] | None = None
) -> TrainingOperator:
    """ml/llama with its two workers bound, n1 and n2 GPUs 0-3."""
    owner = owner_reference("PyTorchJob", "llama", "kubeflow.org/v1")
    notes = {**ELASTIC, **(annotations or {})}
    for index, node in enumerate(("n1", "n2")):
        labels = {**WORKER_LABELS, "training.kubeflow.org/replica-index": str(index)}
        worker = gpu_pod(
            f"llama-worker-{index}",
            gpus=4,
            qos="Guaranteed",
            node=node,
            gpu_indices="0,1,2,3",
            owner=owner,
            labels=labels,
            annotations=notes,
        )
        live.fake.add_pod(worker)
    template = gpu_pod("template", gpus=4, qos="Guaranteed", owner=owner, annotations=notes)
    template["metadata"]["labels"] = dict(WORKER_LABELS)
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "llama", "namespace": "ml"},
        "spec": {
            "elasticPolicy": {"rdzvBackend": "c10d", "minReplicas": 1, "maxReplicas": 2},
            "pytorchReplicaSpecs": {"Worker": {"replicas": 2, "restartPolicy": "OnFailure"}},
        },
    }
    return TrainingOperator(live.fake, job, template)
