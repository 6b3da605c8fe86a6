"""The control loop's actuators on the embedded cluster (``kubesage serve --embedded``).

No API server: the actions change the :class:`~kubesage.core.k8s.embedded.EmbeddedCluster`
this process owns, through the same paths the extender uses.

- **Bind** goes through the one bind path
  (:meth:`EmbeddedCluster.binder <kubesage.core.k8s.embedded.EmbeddedCluster.binder>`:
  assume, then post) with :class:`~kubesage.core.k8s.binding.BindActuator`, as on a
  live cluster: the action's placement (node, GPUs in ring order, MIG slot) is
  honoured exactly. A pod that no longer fits there, or is bound elsewhere, is REFUSED.
- **Evict** gives the pod's resources back and keeps it as pending (what a
  controller would re-create), for the loop to re-place. There are no
  PodDisruptionBudgets here; a pod that is not bound (gone already, or pending) is
  DONE, as a 404 is on a live cluster.

The embedded cluster holds no Jobs, PyTorchJobs or node labels: Scale, Patch and
LabelNode have no actuator here, so the loop reports them as having none.
"""

from __future__ import annotations

from kubesage.core.k8s.binding import BindActuator
from kubesage.core.k8s.embedded import EmbeddedCluster
from kubesage.core.loop.actions import Action, ActionKind, Evict
from kubesage.core.loop.reconciler import Actuator, Outcome, Result
from kubesage.core.policy.base import Policy


class EmbeddedEvictor:
    """Evict from the embedded cluster: resources released, the pod pending again."""

    def __init__(self, cluster: EmbeddedCluster) -> None:
        self._cluster = cluster

    @property
    def kinds(self) -> frozenset[ActionKind]:
        return frozenset({ActionKind.EVICT})

    def execute(self, action: Action) -> Result:
        if not isinstance(action, Evict):
            return Result(Outcome.FAILED, f"{type(action).__name__} is not an Evict")
        pod = action.pod
        evicted = self._cluster.evict(pod.namespace, pod.name, pod.uid)
        if evicted is None:
            return Result(Outcome.DONE, f"pod {pod} is not bound in the embedded cluster")
        return Result(Outcome.DONE, f"pod {pod} evicted from {evicted.evicted_from}; pending")


def embedded_actuators(cluster: EmbeddedCluster, policy: Policy) -> list[Actuator]:
    """The actuators of the embedded cluster: bind and evict."""
    return [BindActuator(cluster.binder(policy)), EmbeddedEvictor(cluster)]
