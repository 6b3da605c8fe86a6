"""ApiPolicySource keeps the SchedulingPolicies fresh in the background, against the FAKE
API server through the real kubernetes client: the webhook's request path reads the last
good list from memory, so a LIST slower than the webhook's 0.5 s budget, a failing LIST
or a first LIST that has not succeeded yet never cost a request its budget."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from kubesage.core.errors import InputError
from kubesage.core.k8s import policy_source
from kubesage.core.k8s.policy_source import ApiPolicySource, PolicySourceError
from kubesage.core.k8s.webhook import AdmissionWebhook
from tests.core.k8s.webhook_support import call, fallbacks, pod_object, review
from tests.fakes.apiserver import SCHEDULING_POLICIES, FakeApiServer, wait_until

BUDGET_S = 5.0
"""The webhook's time budget here: ten times the default, so a stall of a loaded test
machine does not answer for the webhook; a request that waited on a LIST held back
(below) still runs out of it."""
HELD_LIST_S = 30.0
"""The longest a held LIST waits to be let go (the test lets it go much sooner)."""
LIST_PATH = "apis/kubesage.io/v1alpha1/schedulingpolicies"


def policy(name: str, scheduler: str, priority: int = 0) -> dict[str, Any]:
    return {
        "apiVersion": "kubesage.io/v1alpha1",
        "kind": "SchedulingPolicy",
        "metadata": {"name": name},
        "spec": {
            "priority": priority,
            "podSelector": {},
            "inject": {"schedulerName": scheduler},
        },
    }


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        server.add_custom(SCHEDULING_POLICIES, policy("to-kubesage", "kubesage"))
        yield server


def lists(fake: FakeApiServer) -> int:
    """LIST calls of the SchedulingPolicies the fake has received."""
    return len(fake.requests_to("GET", LIST_PATH))


def injected_scheduler(webhook: AdmissionWebhook, uid: str = "u-0") -> str | None:
    """The schedulerName the webhook's patch sets on a new pod (None: unchanged)."""
    _, patch = call(webhook, review(pod_object(), uid=uid))
    values = [op["value"] for op in patch if op["path"] == "/spec/schedulerName"]
    return values[0] if values else None


class SlowLists:
    """Makes the fake hold every SchedulingPolicy LIST until ``release`` is set (at most
    ``HELD_LIST_S``), like an API server under load; ``started`` is set once such a LIST
    is being served."""

    def __init__(self, fake: FakeApiServer, monkeypatch: pytest.MonkeyPatch) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        record = fake.record

        def slow_record(request: Any) -> None:
            record(request)
            if request.method == "GET" and request.path.endswith(LIST_PATH):
                self.started.set()
                self.release.wait(HELD_LIST_S)

        monkeypatch.setattr(fake, "record", slow_record)


def test_requests_during_a_slow_list_are_patched_from_the_last_list(
    fake: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = ApiPolicySource(fake.client(), refresh_s=0.2)
    webhook = AdmissionWebhook(source, budget_s=BUDGET_S)
    slow: SlowLists | None = None
    try:
        assert injected_scheduler(webhook) == "kubesage"  # also starts the refresher
        slow = SlowLists(fake, monkeypatch)
        # the list is due again after refresh_s
        assert slow.started.wait(HELD_LIST_S), "the refresher did not list again"
        # Four members of one Job created while the refresh is still waiting on the API.
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda i: injected_scheduler(webhook, f"u-{i}"), range(4)))
        # answered while the LIST is held: a request that waited on it would have run
        # out of its budget and been admitted unchanged (None)
        assert answers == ["kubesage"] * 4
    finally:
        if slow is not None:
            slow.release.set()
        source.stop()
        webhook.close()


def test_a_policy_created_later_is_picked_up_after_the_refresh_interval(
    fake: FakeApiServer,
) -> None:
    with ApiPolicySource(fake.client(), refresh_s=0.2) as source:
        webhook = AdmissionWebhook(source, budget_s=30.0)
        assert [p.name for p in source.policies()] == ["to-kubesage"]
        fake.add_custom(SCHEDULING_POLICIES, policy("to-gang", "volcano", priority=10))
        wait_until(lambda: len(source.policies()) == 2, 10, "the refresher to list the new policy")
        assert injected_scheduler(webhook) == "volcano"
        assert source.lists >= 2 and not source.stale
        webhook.close()


def test_a_failing_list_keeps_the_last_list_counts_it_and_recovers(
    fake: FakeApiServer,
) -> None:
    now = [0.0]
    source = ApiPolicySource(fake.client(), refresh_s=0.1, backoff_s=0.05, clock=lambda: now[0])
    webhook = AdmissionWebhook(source, budget_s=30.0)
    assert source.listed and source.age_s == 0.0 and source.failures == 0
    counted = fallbacks("policy_source", "api_error")
    fake.add_custom(SCHEDULING_POLICIES, policy("to-gang", "volcano", priority=10))
    fake.fail("GET", LIST_PATH, 503, times=1_000_000)
    now[0] = 40.0
    with source:
        wait_until(lambda: source.failures >= 3, 10, "three failed lists")
        # The old list is served, marked stale, with how old it is.
        assert [p.name for p in source.policies()] == ["to-kubesage"]
        assert injected_scheduler(webhook) == "kubesage"
        assert source.stale and source.age_s == 40.0
        assert source.error is not None and "503" in source.error
        assert fallbacks("policy_source", "api_error") >= counted + 3
        fake.clear_faults()
        wait_until(lambda: not source.stale, 10, "a list to succeed again")
        assert sorted(p.name for p in source.policies()) == ["to-gang", "to-kubesage"]
        assert source.age_s == 0.0 and source.error is None
        assert injected_scheduler(webhook) == "volcano"
    webhook.close()


def test_before_the_first_list_succeeds_pods_are_admitted_unchanged_without_waiting(
    fake: FakeApiServer,
) -> None:
    fake.fail("GET", LIST_PATH, 500, times=1_000_000)
    source = ApiPolicySource(fake.client(), refresh_s=0.2, backoff_s=0.05)
    webhook = AdmissionWebhook(source, budget_s=BUDGET_S)
    assert not source.listed and source.failures == 1
    with pytest.raises(PolicySourceError, match=r"schedulingpolicies\.kubesage\.io: HTTP 500"):
        source.policies()
    response, patch = call(webhook, review(pod_object()))
    assert patch == [] and "schedulingpolicies.kubesage.io" in response["warnings"][0]
    source.start()
    wait_until(lambda: source.failures >= 3, 10, "the refresher to retry")
    assert not source.wait_until_synced(0.05)
    fake.clear_faults()
    assert source.wait_until_synced(10)
    assert injected_scheduler(webhook) == "kubesage"
    source.stop()
    webhook.close()


def test_an_invalid_object_is_skipped_and_counted_once_per_change(
    fake: FakeApiServer,
) -> None:
    broken = policy("broken", "kubesage")
    broken["spec"]["inject"]["spark"] = {"locality": "continent"}
    fake.add_custom(SCHEDULING_POLICIES, broken)
    with ApiPolicySource(fake.client(), refresh_s=0.05) as source:
        assert [p.name for p in source.policies()] == ["to-kubesage"]
        assert source.invalid == 1
        wait_until(lambda: source.lists >= 3, 10, "two refreshes")
        # Unchanged objects are not decoded again: no warning every refresh_s.
        assert [p.name for p in source.policies()] == ["to-kubesage"]
        assert source.invalid == 1 and not source.stale
        fake.add_custom(SCHEDULING_POLICIES, policy("to-gang", "volcano", priority=10))
        wait_until(lambda: len(source.policies()) == 2, 10, "the new policy")
        assert source.invalid == 2


def test_reads_never_call_the_api(fake: FakeApiServer) -> None:
    source = ApiPolicySource(fake.client(), refresh_s=3600.0)
    assert lists(fake) == 1  # the constructor's list
    for _ in range(20):
        assert [p.name for p in source.policies()] == ["to-kubesage"]
    assert lists(fake) == 1
    source.stop()


def test_stop_ends_the_refresher_and_a_dropped_source_stops_listing(
    fake: FakeApiServer,
) -> None:
    source = ApiPolicySource(fake.client(), refresh_s=0.05)
    source.start()
    wait_until(lambda: lists(fake) >= 3, 10, "the refresher to list")
    source.stop()
    calls = lists(fake)
    time.sleep(0.3)
    assert lists(fake) == calls
    assert [p.name for p in source.policies()] == ["to-kubesage"]  # no restart after stop
    time.sleep(0.2)
    assert lists(fake) == calls
    # A source read by a webhook without start() refreshes itself (started on the first
    # read), and its thread ends once nothing references the source any more.
    dropped = ApiPolicySource(fake.client(), refresh_s=0.05)
    dropped.policies()
    wait_until(lambda: lists(fake) >= calls + 3, 10, "the lazily started refresher")
    del dropped
    gc.collect()
    time.sleep(0.2)
    calls = lists(fake)
    time.sleep(0.3)
    assert lists(fake) == calls


@pytest.mark.parametrize("option", ["refresh_s", "timeout_s", "backoff_s", "max_backoff_s"])
def test_bad_options_are_rejected(fake: FakeApiServer, option: str) -> None:
    with pytest.raises(InputError, match=option):
        ApiPolicySource(fake.client(), **{option: 0.0})


def test_serve_starts_the_refresher_and_stops_it_on_shutdown(
    fake: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kubesage.core.cli.serve_services import live_service

    class QuickSource(ApiPolicySource):
        def __init__(self, api_client: Any) -> None:
            super().__init__(api_client, refresh_s=0.05)

    monkeypatch.setattr(policy_source, "ApiPolicySource", QuickSource)
    service = live_service(fake.client())
    try:
        assert lists(fake) >= 1  # listed before the first request
        # Refreshed with no request at all: serve started the refresher.
        wait_until(lambda: lists(fake) >= 4, 10, "serve's refresher to list")
    finally:
        service.stop()
    calls = lists(fake)
    time.sleep(0.3)
    assert lists(fake) == calls


def test_serve_is_not_ready_until_the_policies_are_listed(fake: FakeApiServer) -> None:
    """The webhook answers from the policy list: before it, every pod would be admitted
    unchanged, so the replica is not Ready and says why."""
    from kubesage.core.cli.serve_services import live_service
    from tests.core.k8s import v1_node

    fake.add_node(v1_node("gpu-a"))
    fake.fail("GET", r"schedulingpolicies", 403, times=10_000)
    service = live_service(fake.client())
    try:
        wait_until(lambda: "not listed yet" in service.health()[1], 30, "the sync")
        ready, why = service.health()
        assert not ready and why.startswith("SchedulingPolicy objects not listed yet")
        fake.clear_faults()
        wait_until(lambda: service.health()[0], 60, "the first list after the fault")
    finally:
        service.stop()
