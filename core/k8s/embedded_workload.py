"""Pods arriving at (and leaving) the embedded cluster, when ``kubesage serve --embedded``
is asked for a workload.

The embedded cluster generates nothing of its own; with ``--arrivals-per-s R`` a
background thread submits pods drawn from the cluster's typical pods (the synthetic
openb-like mix) as a Poisson process of rate ``R``, and deletes each bound pod after an
exponential lifetime of mean ``--pod-lifetime-s``. The control loop's
``forecast-placement`` binds the arrivals, ``gpu-defrag`` makes room when a GPU pod
pends only for fragmentation: the whole loop, visible on ``/debug/loop``, on one
machine. Arrivals pause while ``max_pending`` pods wait (a full cluster does not grow a
queue without bound).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kubesage.core.errors import InputError
from kubesage.core.k8s.embedded import EmbeddedCluster
from kubesage.core.periodic import every

NAMESPACE = "embedded"
DEFAULT_LIFETIME_S = 300.0
DEFAULT_MAX_PENDING = 50


@dataclass
class WorkloadStats:
    submitted: int = 0
    deleted: int = 0


class EmbeddedWorkload:
    """Poisson arrivals and exponential lifetimes on an embedded cluster."""

    def __init__(
        self,
        cluster: EmbeddedCluster,
        arrivals_per_s: float,
        *,
        lifetime_s: float = DEFAULT_LIFETIME_S,
        max_pending: int = DEFAULT_MAX_PENDING,
        seed: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not arrivals_per_s > 0:
            raise InputError(f"--arrivals-per-s must be positive, got {arrivals_per_s}")
        if not lifetime_s > 0:
            raise InputError(f"--pod-lifetime-s must be positive, got {lifetime_s}")
        if not cluster.workload:
            raise InputError("the embedded cluster has no typical pods to draw arrivals from")
        self.cluster = cluster
        self.rate = arrivals_per_s
        self.lifetime_s = lifetime_s
        self.max_pending = max_pending
        self.stats = WorkloadStats()
        self._rng = np.random.default_rng(seed)
        self._clock = clock
        self._next_arrival = clock() + self._rng.exponential(1.0 / arrivals_per_s)
        self._deadlines: dict[str, float] = {}
        """``namespace/name`` of a submitted pod → when it is deleted once bound."""

    def step(self) -> None:
        """Submit the arrivals due by now; delete the bound pods whose lifetime is over."""
        now = self._clock()
        while self._next_arrival <= now:
            self._next_arrival += self._rng.exponential(1.0 / self.rate)
            if len(self.cluster.pending) >= self.max_pending:
                continue
            typical = self.cluster.workload[int(self._rng.integers(len(self.cluster.workload)))]
            name = f"arrival-{self.stats.submitted}"
            request = typical.model_copy(update={"name": f"{NAMESPACE}/{name}"})
            self.cluster.submit(NAMESPACE, name, request)
            self._deadlines[f"{NAMESPACE}/{name}"] = now + self._rng.exponential(self.lifetime_s)
            self.stats.submitted += 1
        pending = {f"{p.namespace}/{p.name}" for p in self.cluster.pending.values()}
        for key, deadline in list(self._deadlines.items()):
            if deadline <= now and key not in pending:
                namespace, _, name = key.partition("/")
                self.cluster.delete(namespace, name)
                del self._deadlines[key]
                self.stats.deleted += 1

    def start(self, period_s: float = 0.5) -> Callable[[], None]:
        """Step every ``period_s`` in a daemon thread; return the function that stops it."""
        return every(period_s, self.step, name="embedded-workload")
