"""The control loop sees the room kube-scheduler's preemption freed for a nominated pod
(``status.nominatedNodeName``) as taken, as the secondary scheduler does: a pod the loop
places never takes it."""

from __future__ import annotations

from kubesage.core.cli.loop_sources import LiveClusterCollector
from kubesage.core.k8s.informer import ClusterSync
from kubesage.core.loop.world import ClusterObservation
from tests.core.k8s import v1_container, v1_node, v1_pod
from tests.fakes.apiserver import FakeApiServer, wait_until

SCHEDULER = "kubesage"
EIGHT = {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "8"}
ONE = {"cpu": "1", "memory": "4Gi", "nvidia.com/gpu": "1"}


def test_a_nominated_pods_room_is_taken_in_the_loops_view() -> None:
    with FakeApiServer() as fake:
        fake.add_node(v1_node("n1", gpus=8))
        fake.add_node(v1_node("n2", gpus=8))
        sync = ClusterSync(fake.client(), backoff_s=0.02, max_backoff_s=0.1)
        sync.start()
        try:
            assert sync.wait_until_ready(10)
            collector = LiveClusterCollector(sync, [SCHEDULER])
            high = v1_pod("high", containers=[v1_container(requests=EIGHT)], priority=1_000)
            high["status"]["nominatedNodeName"] = "n1"  # its victims are going
            fake.add_pod(high)
            low = [v1_container(requests=ONE)]
            fake.add_pod(v1_pod("low", containers=low, scheduler_name=SCHEDULER, priority=0))
            wait_until(lambda: len(sync.pending_pods(SCHEDULER)) == 1, what="the pods seen")
            observation = collector.collect().data
            assert isinstance(observation, ClusterObservation)
            state = observation.state
            free = dict(zip(state.node_names, state.gpu_free_milli_node.tolist(), strict=True))
            assert free == {"n1": 0, "n2": 8_000}
            assert observation.pods["ml/low"].request.num_gpu == 1
            assert observation.pods["ml/high"].nominated  # no migration is planned for it
            assert not observation.pods["ml/low"].nominated
            with sync.locked() as (live, _):  # the sync's own state is not changed
                assert int(live.gpu_free_milli_node[live.node_index["n1"]]) == 8_000
            # A pod above the nominated one's priority may take its room, as in kube-scheduler.
            fake.delete_pod("ml", "low")
            urgent = v1_pod("urgent", containers=low, scheduler_name=SCHEDULER, priority=5_000)
            fake.add_pod(urgent)
            wait_until(
                lambda: [p["metadata"]["name"] for p in sync.pending_pods(SCHEDULER)] == ["urgent"],
                what="the urgent pod seen",
            )
            observation = collector.collect().data
            assert isinstance(observation, ClusterObservation)
            state = observation.state
            assert int(state.gpu_free_milli_node[state.node_index["n1"]]) == 8_000
        finally:
            sync.stop()
