"""Whether a node can start a pod's MIG instance now: the gate on binds.

A MIG re-layout (``gpu-defrag``) labels its node with the mig-parted config the GPU
Operator's MIG Manager is to apply (``nvidia.com/mig.config``). MIG Manager reports its
progress in ``nvidia.com/mig.config.state`` (``pending`` while it works, then
``success`` or ``failed``) and restarts the device plugin, which then advertises the new
instances in the node's allocatable (``nvidia.com/mig-<profile>``, the mixed strategy).
A pod bound before that is rejected by the kubelet at admission.

So a pod that asks for a MIG instance by name is bound (by the control loop, and by the
secondary scheduler) only where:

- MIG Manager has applied the node's config: it reports ``success``. A node with no
  state label is waited for only when its config is one of kubesage's (``kubesage-…``:
  the loop removed the old report when it set the label, and MIG Manager will write a
  new one); a config an operator set with no report at all means no MIG Manager runs
  there, and only the next point applies;
- the node's allocatable advertises the instance's resource.

Otherwise :func:`mig_wait` says what the bind waits for; the bind is refused, and the
plan it belongs to stops and is retried on a later tick. ``failed`` is not retried by
MIG Manager until the label changes, so that refusal says how to relabel the node.

The planners do not apply this gate (a re-layout exists to create instances a node does
not advertise yet): the bind path does, reading the node from the API server, not from
a cache that may not have seen the loop's own label yet
(:class:`~kubesage.core.k8s.actuators.LiveEligibility`).

Pods that get their MIG devices through DRA claims ask for no ``nvidia.com/mig-*``
resource and pass. What is left: after ``success`` the device plugin may take a moment
to register again; while it has not, a node whose old layout already had the pod's
profile still advertises it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from kubesage.core.errors import InputError
from kubesage.core.k8s.mig_manager import MIG_CONFIG_LABEL, MIG_CONFIG_STATE_LABEL, OWN_PREFIX
from kubesage.core.k8s.mig_names import MIG_RESOURCE_PREFIX
from kubesage.core.k8s.translate import effective_requests, parse_quantity

APPLIED_STATE = "success"
"""MIG Manager's ``nvidia.com/mig.config.state`` once the labelled config is applied."""
FAILED_STATE = "failed"
"""MIG Manager's report on a config it could not apply (it waits for the label to change)."""
BUSY_STATES = frozenset({"pending", "rebooting"})
"""MIG Manager's reports while it applies a config."""


def mig_resources(pod: Mapping[str, Any]) -> list[str]:
    """The ``nvidia.com/mig-*`` resources ``pod`` asks for (none when its spec is
    unreadable: the bind path refuses such a pod itself)."""
    try:
        requests = effective_requests(pod.get("spec") or {})
    except InputError:
        return []
    return sorted(
        key for key, value in requests.items() if key.startswith(MIG_RESOURCE_PREFIX) and value > 0
    )


def mig_wait(pod: Mapping[str, Any], node: Mapping[str, Any]) -> str | None:
    """What ``pod``'s MIG instance waits for on ``node`` before it can start there (see
    the module docstring); None when nothing."""
    return mig_wait_for(mig_resources(pod), node)


def mig_wait_for(resources: Sequence[str], node: Mapping[str, Any]) -> str | None:
    """:func:`mig_wait` for a pod that asks for ``resources`` (:func:`mig_resources`)."""
    if not resources:
        return None
    metadata = node.get("metadata") or {}
    name = metadata.get("name") or "?"
    labels: Mapping[str, str] = metadata.get("labels") or {}
    config = labels.get(MIG_CONFIG_LABEL)
    state = labels.get(MIG_CONFIG_STATE_LABEL)
    if config is not None and state == FAILED_STATE:
        return (
            f"MIG Manager failed to apply node {name}'s MIG config {config} "
            f"({MIG_CONFIG_STATE_LABEL}=failed) and retries only when the label changes: "
            f"relabel the node (kubectl label node {name} {MIG_CONFIG_LABEL}-, then "
            f"{MIG_CONFIG_LABEL}={config} once MIG Manager has seen the removal)"
        )
    awaited = state is not None or (config is not None and config.startswith(OWN_PREFIX))
    if config is not None and awaited and state != APPLIED_STATE:
        reported = f"{MIG_CONFIG_STATE_LABEL}={state}" if state else "no state reported yet"
        return (
            f"MIG Manager has not applied node {name}'s MIG config {config} ({reported}); "
            "retried on a later tick"
        )
    allocatable: Mapping[str, Any] = (node.get("status") or {}).get("allocatable") or {}
    for resource in resources:
        try:
            advertised = parse_quantity(allocatable.get(resource, "0"))
        except InputError:
            advertised = Decimal(0)
        if advertised <= 0:
            return (
                f"node {name} does not advertise {resource} (the device plugin has not "
                "published that MIG instance); retried on a later tick"
            )
    return None
