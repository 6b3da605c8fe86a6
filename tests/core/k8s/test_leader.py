"""LeaderElector: two replicas against the fake API server's Lease."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from kubesage.core.errors import InputError
from kubesage.core.k8s.apiclient import load_api_client
from kubesage.core.k8s.leader import LeaderElector
from kubesage.core.observability.metrics import REGISTRY
from tests.fakes.apiserver import LEASES, FakeApiServer, wait_until

LEASE = r"^/apis/coordination.k8s.io/v1/namespaces/kubesage/leases"


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        yield server


def elector(fake: FakeApiServer, identity: str, **kwargs: Any) -> LeaderElector:
    api = load_api_client(str(fake.kubeconfig))
    assert api is not None
    timings: dict[str, Any] = {"lease_s": 1.0, "renew_s": 0.6, "retry_s": 0.05}
    timings.update(kwargs)
    return LeaderElector(
        api, lease_name="kubesage-scheduler", namespace="kubesage", identity=identity, **timings
    )


class Replica:
    """One elector running in a thread, recording when it leads."""

    def __init__(self, elector: LeaderElector) -> None:
        self.elector = elector
        self.stop = threading.Event()
        self.started = 0
        self.stopped = 0
        self.thread = threading.Thread(
            target=elector.run, args=(self._on_start, self._on_stop, self.stop), daemon=True
        )

    def _on_start(self) -> None:
        self.started += 1

    def _on_stop(self) -> None:
        self.stopped += 1

    def __enter__(self) -> Replica:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(5)


def holder(fake: FakeApiServer) -> str:
    return str(fake.lease("kubesage", "kubesage-scheduler")["spec"]["holderIdentity"])


def test_exactly_one_leads_and_the_other_takes_over_when_it_stops(fake: FakeApiServer) -> None:
    # Long leases: a replica starved of CPU on a busy machine must not lose the lease
    # here; the takeover below is through the release, not expiry.
    slow = {"lease_s": 5.0, "renew_s": 3.0}
    with Replica(elector(fake, "a", **slow)) as a, Replica(elector(fake, "b", **slow)) as b:
        wait_until(lambda: a.elector.is_leader or b.elector.is_leader, what="a leader")
        leader, follower = (a, b) if a.elector.is_leader else (b, a)
        # Several renew rounds: the follower never leads meanwhile.
        renewals = len(fake.requests_to("PUT", LEASE))
        wait_until(lambda: len(fake.requests_to("PUT", LEASE)) >= renewals + 5, what="renewals")
        assert not follower.elector.is_leader and follower.started == 0
        assert holder(fake) == leader.elector.identity

        leader.stop.set()
        leader.thread.join(5)
        assert leader.stopped == 1 and not leader.elector.is_leader
        wait_until(lambda: follower.elector.is_leader, what="takeover")
        lease = fake.lease("kubesage", "kubesage-scheduler")
        assert lease["spec"]["holderIdentity"] == follower.elector.identity
        assert lease["spec"]["leaseTransitions"] == 1
        assert lease["spec"]["leaseDurationSeconds"] == 5
        renewed = datetime.fromisoformat(lease["spec"]["renewTime"].replace("Z", "+00:00"))
        assert renewed.tzinfo is not None


def test_a_crashed_leader_is_replaced_after_its_lease_expires(fake: FakeApiServer) -> None:
    crashed = elector(fake, "crashed")
    assert crashed.try_acquire_or_renew()  # leads once, then never renews nor releases
    with Replica(elector(fake, "survivor")) as survivor:
        wait_until(lambda: survivor.elector.is_leader, what="takeover after expiry")
        assert holder(fake) == "survivor"
        assert fake.lease("kubesage", "kubesage-scheduler")["spec"]["leaseTransitions"] == 1
        assert not crashed.try_acquire_or_renew()  # back from the dead: the lease is taken


def test_leader_steps_down_when_it_cannot_renew(fake: FakeApiServer) -> None:
    with Replica(elector(fake, "a")) as a:
        wait_until(lambda: a.elector.is_leader, what="leader")
        fake.fail("GET", LEASE, 500, times=10_000)
        wait_until(lambda: a.stopped == 1, what="step down")
        assert not a.elector.is_leader
        fake.clear_faults()
        wait_until(lambda: a.started == 2, what="leads again once the API is back")


def test_a_live_lease_is_kept_a_released_one_is_taken_and_409_loses(
    fake: FakeApiServer,
) -> None:
    first, second = elector(fake, "x"), elector(fake, "y")
    assert first.try_acquire_or_renew()
    assert not second.try_acquire_or_renew()  # held and live
    first.release()
    assert holder(fake) == ""
    fake.fail("PUT", LEASE, 409)  # another candidate wrote between our read and write
    assert not second.try_acquire_or_renew()
    assert second.try_acquire_or_renew()
    assert holder(fake) == "y"
    assert not first.try_acquire_or_renew()


def test_stale_resource_version_is_refused_by_the_fake_like_the_api(fake: FakeApiServer) -> None:
    from kubernetes import client

    api = load_api_client(str(fake.kubeconfig))
    leases = client.CoordinationV1Api(api)
    body = {"metadata": {"name": "l", "namespace": "kubesage"}, "spec": {"holderIdentity": "a"}}
    created = leases.create_namespaced_lease("kubesage", body)
    with pytest.raises(client.ApiException) as exists:
        leases.create_namespaced_lease("kubesage", body)
    assert exists.value.status == 409 and "already exists" in exists.value.body
    stale = {**body, "metadata": {**body["metadata"], "resourceVersion": "1"}}
    with pytest.raises(client.ApiException) as conflict:
        leases.replace_namespaced_lease("l", "kubesage", stale)
    assert conflict.value.status == 409 and "has been modified" in conflict.value.body
    fresh = {
        **body,
        "metadata": {**body["metadata"], "resourceVersion": created.metadata.resource_version},
    }
    assert leases.replace_namespaced_lease("l", "kubesage", fresh).spec.holder_identity == "a"


def test_lead_runs_work_only_while_leading(fake: FakeApiServer) -> None:
    stop = threading.Event()
    ran = threading.Event()
    lost = []

    def work(lost_event: threading.Event) -> None:
        ran.set()
        lost_event.wait()
        lost.append(True)

    leader = elector(fake, "w", lease_s=5.0, renew_s=3.0)
    thread = threading.Thread(target=leader.lead, args=(work, stop), daemon=True)
    thread.start()
    assert ran.wait(5)
    stop.set()
    thread.join(5)
    assert lost == [True]
    assert holder(fake) == ""  # released on the way out


@pytest.mark.parametrize(
    "timings",
    [
        {"lease_s": 10, "renew_s": 10, "retry_s": 2},
        {"lease_s": 15, "renew_s": 10, "retry_s": 10},
        {"lease_s": 15, "renew_s": 10, "retry_s": 0},
    ],
)
def test_inconsistent_timings_are_rejected(fake: FakeApiServer, timings: dict[str, Any]) -> None:
    with pytest.raises(InputError, match="retry_s < renew_s < lease_s"):
        elector(fake, "a", **timings)


def test_the_leader_gauge_follows_the_lease(fake: FakeApiServer) -> None:
    def gauge() -> float | None:
        return REGISTRY.get_sample_value("kubesage_leader", {"lease": "kubesage-scheduler"})

    with Replica(elector(fake, "a")) as a:
        wait_until(lambda: gauge() == 1, what="the gauge at 1 while leading")
        fake.fail("GET", LEASE, 500, times=10_000)
        wait_until(lambda: a.stopped == 1, what="step down")
        assert gauge() == 0


def test_a_renew_applied_whose_answer_was_lost_keeps_the_lease(fake: FakeApiServer) -> None:
    a = elector(fake, "a", lease_s=30.0, renew_s=20.0)
    assert a.try_acquire_or_renew()
    acquired = fake.lease("kubesage", "kubesage-scheduler")["spec"]["acquireTime"]
    fake.fail("PUT", LEASE, 504, after_apply=True, message="request timed out")
    assert not a.try_acquire_or_renew()  # applied, but the answer is lost
    assert a.try_acquire_or_renew()  # the next renew goes through, not after 30 s
    spec = fake.lease("kubesage", "kubesage-scheduler")["spec"]
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("a", 0)
    assert spec["acquireTime"] == acquired
    # Safety: nobody else, not even this identity in another process, takes it.
    assert not elector(fake, "b", lease_s=30.0, renew_s=20.0).try_acquire_or_renew()
    assert not elector(fake, "a", lease_s=30.0, renew_s=20.0).try_acquire_or_renew()
    assert a.try_acquire_or_renew()


def test_a_lost_answer_does_not_adopt_a_record_written_by_another_process(
    fake: FakeApiServer,
) -> None:
    a = elector(fake, "a", lease_s=30.0, renew_s=20.0)
    assert a.try_acquire_or_renew()
    fake.fail("PUT", LEASE, 504)  # not applied
    assert not a.try_acquire_or_renew()

    def renewed_by_a_twin(lease: dict[str, Any]) -> None:  # the same identity elsewhere
        lease["spec"]["renewTime"] = "2030-01-01T00:00:00.000000Z"

    fake.modify(LEASES, "kubesage", "kubesage-scheduler", renewed_by_a_twin)
    assert not a.try_acquire_or_renew()  # not our write: waited out like another holder


def test_a_label_added_to_the_lease_does_not_depose_its_leader(fake: FakeApiServer) -> None:
    a = elector(fake, "a", lease_s=30.0, renew_s=20.0)
    assert a.try_acquire_or_renew()

    def labelled(lease: dict[str, Any]) -> None:  # kubectl label, a GitOps controller
        lease["metadata"].setdefault("labels", {})["team"] = "ml"

    fake.modify(LEASES, "kubesage", "kubesage-scheduler", labelled)
    assert a.try_acquire_or_renew()  # still ours: only the metadata changed
    lease = fake.lease("kubesage", "kubesage-scheduler")
    assert (lease["spec"]["leaseTransitions"], lease["metadata"]["labels"]) == (0, {"team": "ml"})
    # The same identity in another process never wrote this record: it waits it out.
    assert not elector(fake, "a", lease_s=30.0, renew_s=20.0).try_acquire_or_renew()


@pytest.mark.parametrize(
    ("lease_s", "renew_s", "written"), [(0.4, 0.3, 1), (10.4, 10.3, 11), (15, 10, 15)]
)
def test_lease_duration_is_written_in_whole_seconds_never_below_the_lease(
    fake: FakeApiServer, lease_s: float, renew_s: float, written: int
) -> None:
    a = elector(fake, "a", lease_s=lease_s, renew_s=renew_s, retry_s=0.1)
    assert a.try_acquire_or_renew()  # the create
    assert a.try_acquire_or_renew()  # and an update
    duration = fake.lease("kubesage", "kubesage-scheduler")["spec"]["leaseDurationSeconds"]
    assert duration == a.lease_duration_s == written
    assert renew_s < lease_s <= duration


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"leaseDurationSeconds": 0},
            'Lease.coordination.k8s.io "l" is invalid: spec.leaseDurationSeconds: '
            "Invalid value: 0: must be greater than 0",
        ),
        (
            {"leaseTransitions": -1},
            'Lease.coordination.k8s.io "l" is invalid: spec.leaseTransitions: '
            "Invalid value: -1: must be greater than or equal to 0",
        ),
    ],
)
def test_the_fake_refuses_invalid_leases_like_the_api(
    fake: FakeApiServer, spec: dict[str, Any], message: str
) -> None:
    from kubernetes import client

    api = load_api_client(str(fake.kubeconfig))
    leases = client.CoordinationV1Api(api)
    body = {"metadata": {"name": "l", "namespace": "kubesage"}, "spec": spec}
    with pytest.raises(client.ApiException) as invalid:
        leases.create_namespaced_lease("kubesage", body)
    assert invalid.value.status == 422
    status = json.loads(invalid.value.body)
    assert (status["reason"], status["message"]) == ("Invalid", message)
    valid = {"metadata": body["metadata"], "spec": {"leaseDurationSeconds": 1}}
    created = leases.create_namespaced_lease("kubesage", valid)
    created.spec.lease_duration_seconds = 0
    with pytest.raises(client.ApiException) as on_update:
        leases.replace_namespaced_lease("l", "kubesage", created)
    assert on_update.value.status == 422
