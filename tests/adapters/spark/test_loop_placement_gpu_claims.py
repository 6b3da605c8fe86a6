"""``spark-placement`` claims from the secondary scheduler only the executors it places:
one rule (``places``) decides both, so no executor is claimed and then left unplaced."""

from __future__ import annotations

import dataclasses

from kubesage.adapters.spark.loop_placement import SparkPlacementReconciler, places
from kubesage.core.loop.actions import Bind, Plan
from kubesage.core.loop.view import PodInfo
from kubesage.core.state import ClusterState
from kubesage.core.topology.examples import example_topology
from kubesage.core.topology.graph import DRTG
from tests.adapters.spark.test_loop_placement import executors, view


def with_gpus(pod: PodInfo, **gpus: int) -> PodInfo:
    return dataclasses.replace(pod, request=pod.request.model_copy(update=gpus))


def test_gpu_executors_are_not_claimed_so_the_secondary_scheduler_keeps_them() -> None:
    drtg = DRTG.from_yaml(example_topology("dgx-h100-pod"))
    cpu, gpu, shared = executors(3, loop_places=False, claimable=True)
    gpu = with_gpus(gpu, num_gpu=1, gpu_milli=1000)
    shared = with_gpus(shared, num_gpu=1, gpu_milli=500)
    reconciler = SparkPlacementReconciler()
    assert reconciler.claims([cpu])
    assert not reconciler.claims([gpu]) and not reconciler.claims([shared])
    assert not reconciler.claims([cpu, gpu])  # a group is claimed whole or not at all

    answer = reconciler.reconcile(view(ClusterState(drtg.node_specs()), [cpu, gpu, shared], drtg))
    bound = {
        str(step.pod)
        for plan in answer.actions
        if isinstance(plan, Plan)
        for step in plan.steps
        if isinstance(step, Bind)
    }
    # Every executor it claims it places, and it places none it does not claim.
    for pod in (cpu, gpu, shared):
        assert (str(pod.ref) in bound) is reconciler.claims([pod]) is places(pod)
    assert bound == {str(cpu.ref)}
