"""Fixes to what makes an action the same one: the pod's UID is part of a Bind's and an
Evict's key (a pod re-created under the same name is another pod), and a plan is
already done only while every step is still the last action done on its target (not
by its id, which a reconciler may number from an in-memory counter)."""

from __future__ import annotations

import json
from pathlib import Path

from kubesage.core.loop.actions import (
    Bind,
    Evict,
    ObjectRef,
    Plan,
    PodRef,
    Reservation,
    Scale,
    digest,
)
from kubesage.core.loop.audit import AuditLog
from kubesage.core.loop.clock import SimulatedClock
from kubesage.core.loop.control import ControlLoop
from kubesage.core.loop.view import PodInfo
from kubesage.core.loop.world import WorldModel
from tests.core.loop.doubles import (
    ClusterCollector,
    RecordingActuator,
    Scripted,
    small_state,
    whole_gpu_pod,
)
from tests.core.loop.test_control import make_loop, outcomes

WHY = {"reconciler": "gpu-gang", "explanation": "place the gang"}
JOB = ObjectRef("kubeflow.org/v1", "PyTorchJob", "default", "train")


def bind(name: str, uid: str, gpu: int, plan: str | None = None) -> Bind:
    request = whole_gpu_pod(f"default/{name}")
    placement = small_state().placement(0, [gpu], request)
    return Bind(
        pod=PodRef("default", name, uid), request=request, placement=placement, plan=plan, **WHY
    )


def test_the_pod_uid_is_part_of_a_bind_and_an_eviction_key() -> None:
    first, again = bind("w-0", "uid-1", 0), bind("w-0", "uid-1", 0)
    recreated = bind("w-0", "uid-2", 0)
    assert first.key == again.key and first.key != recreated.key
    old = Evict(pod=PodRef("default", "w-0", "uid-1"), **WHY)
    new = Evict(pod=PodRef("default", "w-0", "uid-2"), **WHY)
    assert old.key != new.key and old.target == new.target == "default/w-0"
    # Without a UID the key is what it always was, so the audit records written then match.
    no_uid = Evict(pod=PodRef("default", "w-0"), **WHY)
    assert no_uid.key == digest(["evict", "default/w-0", None, {}], 16)
    scale = Scale(workload=JOB, replicas=2, **WHY)
    assert scale.key == digest(["scale", str(JOB), None, {"replicas": 2}], 16)


def test_a_gang_recreated_under_the_same_names_is_bound_again() -> None:
    uids = ["uid-a"]

    def gang(view: object) -> list[Plan]:
        steps = tuple(bind(f"w-{i}", f"{uids[0]}-{i}", i, plan="gang/train") for i in range(2))
        return [Plan(id="gang/train", steps=steps, **WHY)]

    actuator = RecordingActuator()
    loop, clock, _ = make_loop([Scripted("gpu-gang", gang)], actuator)
    assert [o for _, _, o in outcomes(loop.tick().records)] == ["done", "done", "done"]
    clock.advance(60.0)
    assert outcomes(loop.tick().records) == [("plan", "gang/train", "already-done")]

    uids[0] = "uid-b"  # the job restarted: same pod names, new pods
    clock.advance(60.0)
    report = loop.tick()
    assert outcomes(report.records) == [
        ("bind", "default/w-0", "done"),
        ("bind", "default/w-1", "done"),
        ("plan", "gang/train", "done"),
    ]
    assert [a.pod.uid for a in actuator.executed if isinstance(a, Bind)] == [
        "uid-a-0",
        "uid-a-1",
        "uid-b-0",
        "uid-b-1",
    ]


def test_an_audit_record_without_the_uid_does_not_match_an_action_with_one(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.jsonl"
    before = Evict(pod=PodRef("default", "w-0"), **WHY)  # recorded before UIDs counted
    record = {
        "tick": 1, "time": 1000.0, "reconciler": "gpu-gang", "action": "evict",
        "target": "default/w-0", "key": before.key, "plan": None, "explanation": "x",
        "outcome": "done", "detail": "",
    }  # fmt: skip
    path.write_text(json.dumps(record) + "\n")
    wants = [before]
    actuator = RecordingActuator()
    loop, _, _ = make_loop(
        [Scripted("gpu-gang", lambda view: wants)], actuator, audit=AuditLog(path)
    )
    assert outcomes(loop.tick().records) == [("evict", "default/w-0", "already-done")]
    wants[:] = [Evict(pod=PodRef("default", "w-0", "uid-1"), **WHY)]
    assert outcomes(loop.tick().records) == [("evict", "default/w-0", "done")]
    assert len(actuator.executed) == 1


def elastic_plan(epoch: int, replicas: int) -> Plan:
    plan_id = f"gpu-elastic/{JOB}/{epoch}"
    step = Scale(
        reconciler="gpu-elastic", explanation="x", plan=plan_id, workload=JOB, replicas=replicas
    )
    return Plan(id=plan_id, reconciler="gpu-elastic", explanation="x", steps=(step,))


def test_a_plan_is_done_by_its_steps_not_by_its_id(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    clock = SimulatedClock(1000.0)
    wants = [elastic_plan(1, 2)]
    reconciler = Scripted("gpu-elastic", lambda view: wants)

    def leader() -> tuple[ControlLoop, RecordingActuator]:
        actuator = RecordingActuator()
        collector = ClusterCollector(clock, small_state())
        loop = ControlLoop(
            clock, {"cluster": collector}, WorldModel(), [reconciler], [actuator],
            audit=AuditLog(path),
        )  # fmt: skip
        return loop, actuator

    first, _ = leader()
    assert [o for _, _, o in outcomes(first.tick().records)] == ["done", "done"]
    clock.advance(60.0)
    # A new leader asks for the same plan: its one step is still the last scale done.
    second, idle = leader()
    assert [o for _, _, o in outcomes(second.tick().records)] == ["already-done"]
    assert idle.executed == []
    wants[:] = [elastic_plan(2, 4)]
    clock.advance(60.0)
    assert [o for _, _, o in outcomes(second.tick().records)] == ["done", "done"]
    second.close()

    # A third leader numbers its epochs from 1 again: "scale to 2" is wanted after the 4.
    wants[:] = [elastic_plan(1, 2)]
    clock.advance(60.0)
    third, actuator = leader()
    report = third.tick()
    assert [(r.action, r.outcome) for r in report.records if r.action != "note"] == [
        ("scale", "done"),
        ("plan", "done"),
    ]
    assert [a.replicas for a in actuator.executed if isinstance(a, Scale)] == [2]


def test_a_plan_does_not_count_on_freeing_a_pod_recreated_under_the_evicted_name() -> None:
    """The world's ``default/a`` is another pod (another UID) than the one the plan
    evicts: evicting the old one frees nothing, so the plan cannot fit and is not
    started."""
    state = small_state(nodes=1)
    squatter = whole_gpu_pod("default/a", gpus=4)
    state.allocate(squatter, state.placement(0, [0, 1, 2, 3], squatter))
    placed = state.placement(0, [0, 1, 2, 3], squatter)
    pods = {"default/a": PodInfo(PodRef("default", "a", "uid-new"), squatter, placed)}
    waiting = whole_gpu_pod("default/waiting", gpus=4)
    target = small_state(nodes=1).placement(0, [0, 1, 2, 3], waiting)
    evict_old = Evict(pod=PodRef("default", "a", "uid-old"), plan="m", **WHY)
    bind_waiting = Bind(
        pod=PodRef("default", "waiting", "w"), request=waiting, placement=target, plan="m", **WHY
    )
    reservation = Reservation(request=waiting, placement=target)
    plan = Plan(id="m", steps=(evict_old, bind_waiting), reservations=(reservation,), **WHY)
    clock = SimulatedClock(0.0)
    actuator = RecordingActuator()
    loop, _, _ = make_loop(
        [Scripted("gpu-gang", lambda view: [plan])],
        actuator,
        clock=clock,
        collector=ClusterCollector(clock, state, pods),
    )
    report = loop.tick()
    assert outcomes(report.records) == [("plan", "m", "refused")]
    assert actuator.executed == []
