"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go does it.

Two or more replicas of ``kubesage serve --scheduler-name`` run; only the holder of
the Lease schedules. Every ``retry_s`` a candidate reads the Lease and takes it
when it is free (no holder, or released) or expired; the leader renews it
(``renewTime``) every ``retry_s``. Writes are PUTs carrying the read
``resourceVersion``, so two candidates racing for an expired lease cannot both win:
the API server answers the loser 409.

Expiry is judged on this process's monotonic clock, from when it last *saw the record
change* (client-go's ``observedTime``), not from the ``renewTime`` timestamp written
by another machine, so clock skew between replicas cannot make a live lease look
expired. A leader that cannot renew within ``renew_s`` steps down (``on_stop``)
before its lease (``lease_s``) can expire for the others, so two leaders never act at
once. The Lease says ``leaseDurationSeconds`` in whole seconds: ``lease_s`` rounded
*up*, so the others never wait less than this leader relies on.

A write whose answer is lost (a timeout, or a 5xx after the server applied it) may
have gone through: the next read that shows this identity as holder with the very
``renewTime`` that write carried is taken as ours (client-go's leader compares only
the holder identity), so the leader keeps its lease rather than stepping down and
counting a transition that did not happen. A record whose only change since our
last write is its metadata (a label or annotation added by kubectl, a GitOps or a
policy controller: a new resourceVersion, the same ``renewTime`` and ``acquireTime``)
is still ours. Any other record naming this identity under a resourceVersion it did
not write (a previous life of this process, say) is waited out like another
holder's. Stopping gracefully releases the lease (empty
holder, one-second duration), so another replica takes over at its next retry instead
of waiting out the lease.
"""

from __future__ import annotations

import json
import logging
import math
import random
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import urllib3

from kubesage.core.errors import InputError
from kubesage.core.k8s.apiclient import ApiClient, ApiException, CoordinationV1Api
from kubesage.core.observability import metrics

log = logging.getLogger(__name__)

Obj = dict[str, Any]


def micro_time(moment: datetime) -> str:
    """A ``metav1.MicroTime`` string (RFC 3339 with microseconds, UTC)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _instant(text: object) -> datetime | None:
    """A MicroTime as a moment (the server may write it in another RFC 3339 form)."""
    try:
        return datetime.fromisoformat(str(text))
    except ValueError:
        return None


def _times(spec: Obj) -> tuple[datetime | None, datetime | None]:
    return _instant(spec.get("renewTime")), _instant(spec.get("acquireTime"))


class LeaderElector:
    """Holds (or waits for) one Lease; see the module docstring for the protocol."""

    def __init__(
        self,
        api: ApiClient,
        *,
        lease_name: str,
        namespace: str,
        identity: str,
        lease_s: float = 15,
        renew_s: float = 10,
        retry_s: float = 2,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        if not identity:
            raise InputError("LeaderElector: identity must not be empty")
        if not 0 < retry_s < renew_s < lease_s:
            raise InputError(
                "LeaderElector: need 0 < retry_s < renew_s < lease_s, got "
                f"retry_s={retry_s}, renew_s={renew_s}, lease_s={lease_s}"
            )
        # Any: called with _preload_content=False (raw JSON), which the generated
        # signatures do not describe.
        self._api: Any = CoordinationV1Api(api)
        self.lease_name = lease_name
        self.namespace = namespace
        self.identity = identity
        self.lease_s = lease_s
        self.lease_duration_s = math.ceil(lease_s)
        """``leaseDurationSeconds`` as written: whole seconds, never less than ``lease_s``
        (so above ``renew_s``)."""
        self.renew_s = renew_s
        self.retry_s = retry_s
        self._clock = clock
        self._wall = wall_clock
        self._leading = threading.Event()
        self._leading_gauge = metrics.LEADER.labels(lease_name)
        self._leading_gauge.set(0)
        self._observed_version: str | None = None
        self._observed_at = 0.0
        self._held_version: str | None = None
        self._held_times: tuple[datetime | None, datetime | None] = (None, None)
        """``renewTime`` and ``acquireTime`` of the record this process last wrote."""
        self._unconfirmed_renew: str | None = None
        """The ``renewTime`` of our last write whose answer was lost (it may be applied)."""
        self._deadline = 0.0

    @property
    def is_leader(self) -> bool:
        return self._leading.is_set()

    # -- the loop --------------------------------------------------------------------------

    def run(
        self,
        on_start: Callable[[], None],
        on_stop: Callable[[], None],
        stop: threading.Event,
    ) -> None:
        """Campaign until ``stop``: ``on_start`` when this replica becomes leader,
        ``on_stop`` when it stops leading (renew failed, or ``stop``)."""
        while not stop.is_set():
            if not self.try_acquire_or_renew(timeout_s=self.renew_s):
                stop.wait(self.retry_s * (1 + 0.2 * random.random()))
                continue
            self._leading.set()
            self._leading_gauge.set(1)
            log.info("%s leads lease %s/%s", self.identity, self.namespace, self.lease_name)
            try:
                on_start()
                last_renew = self._clock()
                while not stop.wait(self.retry_s):
                    # Every request of a renewal ends by the renew deadline (client-go's
                    # context): a hung request cannot keep a deposed leader acting.
                    left = self.renew_s - (self._clock() - last_renew)
                    if left > 0 and self.try_acquire_or_renew(timeout_s=left):
                        last_renew = self._clock()
                    elif self._clock() - last_renew >= self.renew_s:
                        log.warning(
                            "%s could not renew lease %s/%s within %.1fs; stepping down",
                            self.identity,
                            self.namespace,
                            self.lease_name,
                            self.renew_s,
                        )
                        break
            finally:
                self._leading.clear()
                self._leading_gauge.set(0)
                on_stop()
            if stop.is_set():
                self.release()

    def lead(self, work: Callable[[threading.Event], None], stop: threading.Event) -> None:
        """Run ``work(lost)`` in a thread while leading; ``lost`` is set when leadership
        ends, and the thread is joined before the next campaign."""
        current: list[tuple[threading.Thread, threading.Event]] = []

        def started() -> None:
            lost = threading.Event()
            thread = threading.Thread(
                target=work, args=(lost,), name=f"leader-{self.identity}", daemon=True
            )
            current.append((thread, lost))
            thread.start()

        def stopped() -> None:
            while current:
                thread, lost = current.pop()
                lost.set()
                thread.join()

        self.run(started, stopped, stop)

    # -- one step --------------------------------------------------------------------------

    def try_acquire_or_renew(self, timeout_s: float | None = None) -> bool:
        """One read-and-write of the Lease, all within ``timeout_s`` (default ``renew_s``);
        True when this replica holds the Lease afterwards."""
        self._deadline = self._clock() + (timeout_s if timeout_s is not None else self.renew_s)
        try:
            lease = self._read()
        except ApiException as exc:
            if exc.status != 404:
                log.warning("reading lease %s failed: HTTP %s", self.lease_name, exc.status)
                return False
            return self._create()
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            log.warning("reading lease %s failed: %s", self.lease_name, exc)
            return False
        metadata = lease.get("metadata") or {}
        spec = lease.get("spec") or {}
        version = str(metadata.get("resourceVersion") or "")
        if version != self._observed_version:
            self._observed_version = version
            self._observed_at = self._clock()
        holder = spec.get("holderIdentity") or ""
        duration = float(spec.get("leaseDurationSeconds") or self.lease_s)
        if holder == self.identity and self._adopt_unconfirmed(spec, version):
            self._hold(lease)
        mine = holder == self.identity and self._still_ours(spec, version)
        if holder and not mine and self._observed_at + duration > self._clock():
            return False  # held by another replica (or by us in a previous life) and live
        now = micro_time(self._wall())
        transitions = int(spec.get("leaseTransitions") or 0)
        lease["spec"] = {
            **spec,
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.lease_duration_s,
            "renewTime": now,
            "acquireTime": spec.get("acquireTime") if mine else now,
            "leaseTransitions": transitions if mine else transitions + 1,
        }
        return self._write(lease)

    def release(self) -> None:
        """Give the lease up (if held) so another replica can take it at once."""
        if self._held_version is None:
            return
        self._deadline = self._clock() + self.retry_s + 1.0  # best effort: it expires anyway
        try:
            lease = self._read()
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.identity:
                return
            now = micro_time(self._wall())
            lease["spec"] = {
                **spec,
                "holderIdentity": "",
                "leaseDurationSeconds": 1,
                "renewTime": now,
                "acquireTime": now,
            }
            self._api.replace_namespaced_lease(
                self.lease_name,
                self.namespace,
                lease,
                _preload_content=False,
                _request_timeout=self._time_left(),
            ).read()
            log.info("%s released lease %s/%s", self.identity, self.namespace, self.lease_name)
        except (ApiException, urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            log.warning("releasing lease %s failed (it will expire): %s", self.lease_name, exc)
        finally:
            self._held_version = None
            self._unconfirmed_renew = None

    def _adopt_unconfirmed(self, spec: Obj, version: str) -> bool:
        """Whether the record read is our own write whose answer was lost (it carries
        the ``renewTime`` that write sent); clears the doubt either way."""
        sent, self._unconfirmed_renew = self._unconfirmed_renew, None
        if sent is None or version == self._held_version:
            return False
        if _instant(spec.get("renewTime")) != _instant(sent):
            return False
        log.info(
            "%s: lease %s/%s shows our update of renewTime %s applied although its answer "
            "was lost; keeping the lease",
            self.identity,
            self.namespace,
            self.lease_name,
            sent,
        )
        return True

    def _still_ours(self, spec: Obj, version: str) -> bool:
        """Whether a record naming this identity is the one this process last wrote:
        the same resourceVersion, or another (a label or annotation someone added) with
        the very ``renewTime`` and ``acquireTime`` of our last write."""
        if self._held_version is None:
            return False
        if version == self._held_version:
            return True
        if self._held_times != _times(spec):
            return False
        self._held_version = version  # only metadata changed: the record is still ours
        return True

    def _read(self) -> Obj:
        response = self._api.read_namespaced_lease(
            self.lease_name,
            self.namespace,
            _preload_content=False,
            _request_timeout=self._time_left(),
        )
        lease: Obj = json.loads(response.data)
        return lease

    def _time_left(self) -> float:
        """Seconds until the current attempt's deadline (a floor keeps the request valid)."""
        return max(0.01, self._deadline - self._clock())

    def _create(self) -> bool:
        now = micro_time(self._wall())
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.lease_name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": self.lease_duration_s,
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            },
        }
        return self._commit(
            "creating",
            body,
            lambda: self._api.create_namespaced_lease(
                self.namespace, body, _preload_content=False, _request_timeout=self._time_left()
            ),
        )

    def _write(self, lease: Obj) -> bool:
        return self._commit(
            "updating",
            lease,
            lambda: self._api.replace_namespaced_lease(
                self.lease_name,
                self.namespace,
                lease,
                _preload_content=False,
                _request_timeout=self._time_left(),
            ),
        )

    def _commit(self, action: str, lease: Obj, call: Callable[[], Any]) -> bool:
        """Send ``lease`` (a create or update); hold what the server returns.

        False when it fails: a 409 (another replica wrote first, nothing applied)
        quietly, anything else logged; a timeout or 5xx is remembered as possibly
        applied (the answer may be what was lost). The caller retries at its next tick.
        """
        self._unconfirmed_renew = None
        try:
            written: Obj = json.loads(call().data)
        except ApiException as exc:
            if exc.status != 409:
                self._failed(action, lease, f"HTTP {exc.status}", (exc.status or 500) >= 500)
            return False
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            self._failed(action, lease, str(exc), in_doubt=True)
            return False
        self._hold(written)
        return True

    def _failed(self, action: str, lease: Obj, why: str, in_doubt: bool) -> None:
        if in_doubt:
            self._unconfirmed_renew = str(lease["spec"]["renewTime"])
        log.warning(
            "%s lease %s/%s as %s failed (%s)%s",
            action,
            self.namespace,
            self.lease_name,
            self.identity,
            why,
            "; it may have been applied" if in_doubt else "",
        )

    def _hold(self, lease: Obj) -> None:
        version = str((lease.get("metadata") or {}).get("resourceVersion") or "")
        self._held_version = version
        self._held_times = _times(lease.get("spec") or {})
        self._observed_version = version
        self._observed_at = self._clock()
