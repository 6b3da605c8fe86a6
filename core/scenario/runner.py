"""One variant of the mixed-workload scenario on one seed: arrivals, the scheduler, the
control loop on the simulator's clock, and the accounting.

Every ``tick_s`` of simulated time:

1. work that is done leaves (an inference pod or large task ``duration_s`` after it was
   first bound, a training job ``duration_s`` after all its members first ran);
2. the arrivals since the last tick come in, pending (work already running at 0 — the
   warm start — is placed before the first tick, the same way for every variant:
   :func:`start_at_steady_state`);
3. **the scheduler** tries every pending pod, oldest first, as kube-scheduler's queue
   does with the extender (new arrivals and earlier pods that did not fit alike): each
   pod with the variant's policy (``k8s-default``: kube-scheduler's default scoring;
   otherwise the policy ``kubesage serve`` uses), a gang all members or none — except,
   in the variants that run ``gpu-gang``, gangs, which are the loop's (the secondary
   scheduler defers them);
4. **the control loop** (the ``kubesage`` variants) ticks: the same ``ControlLoop``,
   reconcilers and budgets ``kubesage serve`` runs — the installed adapters'
   (``gpu-defrag``, ``gpu-elastic``, ``gpu-gang``) and the core's
   (``forecast-placement``, which finds nothing left to place: the scheduler has tried
   every pod this tick), less the one an ablation drops — over the simulated
   cluster's collectors and actuator (:mod:`~kubesage.core.scenario.sim_cluster`);
5. the tick is accounted (:mod:`~kubesage.core.scenario.accounting`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kubesage.core.adapter import load_adapters
from kubesage.core.errors import InputError
from kubesage.core.loop.clock import SimulatedClock
from kubesage.core.loop.control import ControlLoop
from kubesage.core.loop.placement import ForecastPlacement
from kubesage.core.loop.reconciler import Reconciler
from kubesage.core.loop.settings import LoopSettings, ReconcilerContext
from kubesage.core.loop.world import WorldModel
from kubesage.core.policy.base import Policy, PolicyContext
from kubesage.core.policy.registry import make_policy
from kubesage.core.scenario.accounting import Accounting
from kubesage.core.scenario.cluster import scenario_topology
from kubesage.core.scenario.model import Arrival, UtilisationProfiles, WorkKind
from kubesage.core.scenario.result import VARIANTS, ScenarioSettings, VariantRun
from kubesage.core.scenario.sim_cluster import (
    ClusterSource,
    DcgmSource,
    SimActuator,
    SimCluster,
    SimPod,
)
from kubesage.core.topology.graph import DRTG
from kubesage.core.types import PodRequest

ABLATIONS = {
    "kubesage-no-defrag": "gpu-defrag",
    "kubesage-no-gang": "gpu-gang",
    "kubesage-no-elastic": "gpu-elastic",
}
"""Each ablation and the reconciler it drops."""
LOOP_RECONCILERS = ("gpu-defrag", "gpu-elastic", "gpu-gang", "forecast-placement")
"""The reconcilers of the ``kubesage`` variant (the GPU adapter's and the core's)."""

Progress = Callable[[float], None]
"""Called with the share of the run done (0–1)."""


def uses_loop(variant: str) -> bool:
    return variant.startswith("kubesage")


def reconcilers_for(variant: str, context: ReconcilerContext) -> list[Reconciler]:
    """The variant's reconcilers, built as ``kubesage serve`` builds them."""
    adapters, problems = load_adapters()
    installed: list[Reconciler] = []
    for adapter in adapters:
        # Only the reconcilers: the simulated cluster is the loop's only source and sink
        # (an adapter's collectors would read this machine: NVML, Flink).
        installed.extend(adapter.reconcilers(context))
    if problems:
        raise InputError("the scenario needs the GPU adapter's reconcilers: " + "; ".join(problems))
    dropped = ABLATIONS.get(variant)
    chosen = [
        reconciler
        for reconciler in [*installed, ForecastPlacement.from_context(context)]
        if reconciler.name in LOOP_RECONCILERS and reconciler.name != dropped
    ]
    missing = set(LOOP_RECONCILERS) - {r.name for r in chosen} - {dropped}
    if missing:
        raise InputError(f"reconcilers not installed: {', '.join(sorted(missing))}")
    return chosen


def place_now(cluster: SimCluster, pods: Sequence[SimPod], policy: Policy) -> bool:
    """Place ``pods`` (one gang, or one lone pod) all or none; True when placed."""
    trial = cluster.state.copy()
    placements = []
    for pod in pods:
        decision = policy.decide(trial, pod.request)
        if decision.placement is None:
            return False
        trial.allocate(pod.request, decision.placement)
        placements.append(decision.placement)
    for pod, placement in zip(pods, placements, strict=True):
        cluster.bind(pod, placement)
    return True


def start_at_steady_state(
    cluster: SimCluster,
    accounting: Accounting,
    running: Sequence[Arrival],
    policy_name: str,
    seed: int,
    typical: Sequence[PodRequest],
) -> None:
    """Place the work already running at time 0 (the warm start) before the first tick,
    the same way for every variant: oldest first, a training job's members all or none,
    by ``policy_name`` (the policy ``kubesage serve`` uses) under ``seed``. Every variant
    then starts from the same cluster; before, each variant's scheduler placed this work
    at the first tick in its own order (the baselines' gangs first, the loop's gangs
    after the single pods), which on small or overloaded clusters decided the run.
    Work that does not fit stays pending for the variant's own scheduler."""
    if not running:
        return
    policy = make_policy(policy_name, PolicyContext(seed=seed, workload=tuple(typical)))
    for arrival in sorted(running, key=lambda a: (a.running_since_s or 0.0, a.id)):
        pods = cluster.submit(arrival)
        accounting.arrived(arrival)
        place_now(cluster, pods, policy)


def _groups(pods: Sequence[SimPod], gangs_to_loop: bool) -> list[list[SimPod]]:
    """Pending pods as scheduling units: a not-yet-started training job's members
    together (none when the loop's ``gpu-gang`` places them), every other pod alone."""
    groups: dict[str, list[SimPod]] = {}
    singles: list[list[SimPod]] = []
    for pod in sorted(pods, key=lambda p: (p.arrival.time_s, p.name)):
        if pod.arrival.kind == WorkKind.TRAINING and not pod.regrown:
            if not gangs_to_loop:
                groups.setdefault(pod.arrival.id, []).append(pod)
        else:
            singles.append([pod])
    ordered = [*groups.values(), *singles]
    return sorted(ordered, key=lambda group: group[0].arrival.time_s)


def run_variant(
    settings: ScenarioSettings,
    variant: str,
    seed: int,
    arrivals: Sequence[Arrival],
    profiles: UtilisationProfiles,
    *,
    drtg: DRTG | None = None,
    progress: Progress | None = None,
) -> VariantRun:
    """Run ``variant`` over ``arrivals`` (see the module docstring)."""
    if variant not in VARIANTS:
        raise InputError(f"unknown variant '{variant}'; known: {', '.join(VARIANTS)}")
    drtg = drtg or scenario_topology(settings.gpu_nodes)
    clock = SimulatedClock(0.0)
    cluster = SimCluster(drtg.node_specs(), profiles, clock)
    typical = tuple(pod for arrival in arrivals for pod in arrival.pods)
    policy_name = "k8s-default" if variant == "k8s-default" else settings.policy
    # A run with no arrivals (a tiny cluster, a short or light run) has nothing to place,
    # and FGD cannot derive typical pods from nothing: no policy then.
    policy = (
        make_policy(policy_name, PolicyContext(seed=seed, workload=typical)) if typical else None
    )
    actuator = SimActuator(cluster)
    control: ControlLoop | None = None
    loop_reconcilers: list[Reconciler] = []
    if uses_loop(variant):
        loop_settings = LoopSettings(tick_s=settings.tick_s, max_data_age_s=None)
        context = ReconcilerContext(
            settings=loop_settings,
            topology=drtg,
            policy=settings.policy,
            workload=typical,
            evicted_pods_come_back=True,  # the simulator re-places an evicted pod itself
            rescale_restart_s=0.0,  # and resizes a training job at once
        )
        loop_reconcilers = reconcilers_for(variant, context)
        control = ControlLoop(
            clock,
            {"cluster": ClusterSource(cluster), "dcgm": DcgmSource(cluster)},
            WorldModel(topology=drtg),
            loop_reconcilers,
            [actuator],
            budgets=loop_settings.budgets,
            max_data_age_s=None,
            tick_s=settings.tick_s,
        )
    gangs_to_loop = any(r.name == "gpu-gang" for r in loop_reconcilers)
    accounting = Accounting(cluster, drtg, settings.tick_s)
    end_s = settings.hours * 3600.0
    running = [a for a in arrivals if a.running_since_s is not None]
    start_at_steady_state(cluster, accounting, running, settings.policy, seed, typical)
    queue = sorted(
        (a for a in arrivals if a.running_since_s is None), key=lambda a: (a.time_s, a.id)
    )
    next_arrival = 0
    ticks = max(1, round(end_s / settings.tick_s))
    for tick in range(1, ticks + 1):
        clock.advance(settings.tick_s)
        now = clock.now()
        accounting.finish_done(now)
        while next_arrival < len(queue) and queue[next_arrival].time_s <= now:
            arrival = queue[next_arrival]
            cluster.submit(arrival)
            accounting.arrived(arrival)
            next_arrival += 1
        # The scheduler tries every pending pod, oldest first, as kube-scheduler's queue
        # does (gangs ``gpu-gang`` claims are the loop's).
        for group in _groups(list(cluster.pending()), gangs_to_loop):
            if policy is not None and all(pod.placement is None for pod in group):
                place_now(cluster, group, policy)
        if control is not None:
            control.tick()
        accounting.tick(now)
        if progress is not None and tick % 20 == 0:
            progress(tick / ticks)
    return accounting.result(variant, seed, actuator.done, end_s)
