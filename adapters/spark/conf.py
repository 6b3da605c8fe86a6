"""Spark-on-Kubernetes settings and pod templates that carry out an executor placement.

Spark on Kubernetes cannot resolve racks (only YARN does), so the placement is
enforced by the Kubernetes scheduler through the executors' pod template:

- a required node affinity to the chosen racks' nodes, and a preferred affinity
  weighted by each rack's share. Racks are named by their nodes (``matchFields`` on
  ``metadata.name``, one term or preference per node: the API server takes one value
  in such a requirement), never by a rack label value: a discovered topology names a rack
  without a label ``<node>-rack`` and one whose label value recurs in two zones
  ``<zone>/<value>``, names no node carries (and ``/`` is not allowed in a label
  value), so a label expression would leave every executor pending;
- a preferred pod affinity among the job's executors per rack (``rack_label`` as the
  topology key, where the nodes carry it), so replacements (dynamic allocation, lost
  executors) land beside the others;
- the driver prefers the rack holding the most executors.

Conf: executor count, cores, memory and overhead; dynamic allocation with
shuffle tracking (no external shuffle service on Kubernetes) bounded around the
planned count; ``spark.locality.wait.rack=0s`` because a rack level never
resolves on Kubernetes and waiting for it only delays tasks; optional local dirs
on a fast host disk (a ``spark-local-dir-1`` hostPath volume, which Spark uses
for shuffle and spill files). Pod templates are validated with
kubernetes-validate.

GPU executors (``gpus_per_executor``), in the form the cluster hands GPUs out:

- ``device-plugin`` (default): Spark's own resource conf,
  ``spark.executor.resource.gpu.{amount,vendor,discoveryScript}`` with vendor
  ``nvidia.com``, from which Spark writes an ``nvidia.com/gpu`` limit into each executor
  pod and learns the GPUs' addresses for task scheduling;
- ``dra``: no ``spark.executor.resource.gpu.*`` at all (Spark on Kubernetes turns it
  into an extended-resource limit and refuses it without a vendor); instead the
  executor pod template carries a ``resourceClaims`` entry made from one
  ``ResourceClaimTemplate`` (every executor is a pod of its own, so each gets a claim
  of its own) and the executor container hands it on through ``resources.claims``.
  The template is an object to create in the application's namespace before
  spark-submit; Spark's task-level GPU scheduling (``spark.task.resource.gpu.*``) is
  not available in this form, as Spark knows nothing of the claim.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubesage.adapters.spark.app_kind import AppKind, executor_overhead_mib
from kubesage.adapters.spark.job_hints import INPUT_LOCALITY_ANNOTATION
from kubesage.adapters.spark.placement import ExecutorShape, SparkPlacement
from kubesage.core.dra.api import GPU_DEVICE_CLASS
from kubesage.core.dra.claims import DeviceMode, claim_pod_spec, claim_template
from kubesage.core.errors import InputError
from kubesage.core.k8s.node_eligibility import node_name_term, node_name_terms
from kubesage.core.k8s.v1_models import check_label_key
from kubesage.core.k8s.validation import DRA_KUBERNETES_VERSION, validate_manifests
from kubesage.core.topology.discovery import DEFAULT_RACK_LABEL, ZONE_LABEL
from kubesage.core.topology.graph import DRTG

GROUP_LABEL = "kubesage.io/spark-group"
EXECUTOR_CONTAINER = "spark-kubernetes-executor"
DRIVER_CONTAINER = "spark-kubernetes-driver"
LOCAL_DIR_MOUNT = "/spark-local"
GPU_VENDOR = "nvidia.com"
"""Spark's ``resource.gpu.vendor``: with it Spark asks Kubernetes for ``nvidia.com/gpu``."""
GPU_DISCOVERY_SCRIPT = "/opt/spark/examples/src/main/scripts/getGpusResources.sh"
"""The GPU discovery script shipped in Spark's distribution and its container images."""


_MEMORY = re.compile(r"^\s*(\d+|\d*\.\d+)\s*(b|[kmgtp]b?)?\s*$", re.IGNORECASE)
_BYTES_PER_UNIT = {"b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}
MIN_EXECUTOR_MEMORY_MIB = 450
"""Spark refuses less executor memory (1.5 × the 300 MiB it reserves for itself)."""


def executor_memory_mib(text: str) -> int:
    """``spark.executor.memory`` as Spark reads it — a whole number with an optional unit
    (``b``, ``k``/``kb``, ``m``/``mb``, ``g``/``gb``, ``t``/``tb``, ``p``/``pb``; no unit
    is MiB), converted to whole MiB rounding down, as Spark does: ``4g``, ``4096m``,
    ``4096`` → 4096. A fraction is refused, as Spark refuses it, with the whole-MiB
    spelling to use, and so is less than Spark's minimum (450 MiB)."""
    match = _MEMORY.match(text)
    if match is None:
        raise InputError(f"--memory {text!r} is not a JVM memory size like 4g or 4096m")
    number, unit = match.group(1), (match.group(2) or "m").lower()[0]
    if "." in number:
        whole = max(
            MIN_EXECUTOR_MEMORY_MIB, math.ceil(float(number) * _BYTES_PER_UNIT[unit] / (1 << 20))
        )
        raise InputError(
            f"--memory {text!r}: Spark reads whole numbers; write {whole}m"
            + (
                f" (its minimum is {MIN_EXECUTOR_MEMORY_MIB} MiB)"
                if whole == MIN_EXECUTOR_MEMORY_MIB
                else ""
            )
        )
    mib = int(number) * _BYTES_PER_UNIT[unit] // (1 << 20)
    if mib < MIN_EXECUTOR_MEMORY_MIB:
        raise InputError(
            f"--memory {text!r} is {mib} MiB; Spark refuses executors with less than "
            f"{MIN_EXECUTOR_MEMORY_MIB} MiB"
        )
    return mib


@dataclass(frozen=True)
class SparkSettings:
    conf: dict[str, str]
    executor_template: dict[str, Any]
    driver_template: dict[str, Any]
    claim_templates: tuple[dict[str, Any], ...] = ()
    """With DRA: the ResourceClaimTemplate the executor pods' claims are made from."""

    def submit_args(self) -> list[str]:
        """``--conf key=value`` pairs for spark-submit."""
        args = []
        for key, value in self.conf.items():
            args += ["--conf", f"{key}={value}"]
        return args

    def properties(self) -> str:
        """The conf as a spark-defaults.conf (``--properties-file``) text."""
        return "".join(f"{key} {value}\n" for key, value in self.conf.items())


def executor_pod_shape(shape: ExecutorShape, kind: AppKind = AppKind.jvm) -> ExecutorShape:
    """``shape`` as each executor pod of a ``kind`` application asks Kubernetes for it:
    its memory with the overhead (what must fit on a node)."""
    return dataclasses.replace(
        shape, memory_mib=shape.memory_mib + executor_overhead_mib(shape.memory_mib, kind)
    )


def _pod(group: str, role: str, container: str, affinity: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{group}-{role}", "labels": {GROUP_LABEL: group}},
        "spec": {"affinity": dict(affinity), "containers": [{"name": container}]},
    }


def _in(key: str, values: list[str]) -> dict[str, Any]:
    return {"matchExpressions": [{"key": key, "operator": "In", "values": values}]}


def _rack_nodes(drtg: DRTG, racks: list[str]) -> list[str]:
    """The names of the nodes in ``racks``."""
    chosen = [drtg.rack_names.index(rack) for rack in racks]
    return [
        name for name, rack in zip(drtg.node_names, drtg.node_rack, strict=True) if rack in chosen
    ]


def _prefer_rack(drtg: DRTG, rack: str, weight: int) -> list[dict[str, Any]]:
    """Preferred scheduling terms giving each node of ``rack`` ``weight`` (a node
    matches only its own term, so it scores the rack's weight)."""
    return [
        {"weight": weight, "preference": node_name_term(node)} for node in _rack_nodes(drtg, [rack])
    ]


def spark_settings(
    drtg: DRTG,
    placement: SparkPlacement,
    shape: ExecutorShape,
    *,
    template_dir: str,
    rack_label: str = DEFAULT_RACK_LABEL,
    local_dir: str | None = None,
    gpus_per_executor: int = 0,
    devices: DeviceMode = DeviceMode.device_plugin,
    scheduler_name: str | None = None,
    input_locality: str | None = None,
    app_kind: AppKind = AppKind.jvm,
) -> SparkSettings:
    """Conf and pod templates for ``placement`` (templates written under ``template_dir``);
    GPU executors ask for ``gpus_per_executor`` GPUs in the ``devices`` form. With
    ``scheduler_name`` the executors name that scheduler (kubesage's secondary
    scheduler: the control loop's ``spark-placement`` then binds them), and
    ``input_locality`` goes on each executor as the annotation that reconciler reads.
    The executors' memory overhead is what Spark gives an ``app_kind`` application
    (:mod:`~kubesage.adapters.spark.app_kind`), written out so that the pods are the
    size the placement planned."""
    if gpus_per_executor < 0:
        raise InputError(f"--executor-gpus must be ≥ 0, got {gpus_per_executor}")
    check_label_key(rack_label, "--rack-label")
    per_rack = placement.executors_per_rack(drtg)
    racks = sorted(per_rack, key=lambda r: (-per_rack[r], r))
    # One job's executors attract each other, not another job's of the same shape: the
    # group is the placement's and the folder its templates are written to.
    planned = f"{template_dir}|" + ",".join(map(str, placement.nodes))
    group = "kubesage-" + hashlib.sha256(planned.encode()).hexdigest()[:8]
    zones = sorted({drtg.zone_names[drtg.rack_zone[drtg.rack_names.index(r)]] for r in racks})

    executor_affinity: dict[str, Any] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": node_name_terms(_rack_nodes(drtg, racks))
            },
            "preferredDuringSchedulingIgnoredDuringExecution": [
                term
                for rack in racks
                for term in _prefer_rack(
                    drtg, rack, max(1, round(100 * per_rack[rack] / shape.executors))
                )
            ],
        },
        "podAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "labelSelector": {"matchLabels": {GROUP_LABEL: group}},
                        "topologyKey": rack_label,
                    },
                }
            ]
        },
    }
    driver_affinity = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                *_prefer_rack(drtg, racks[0], 100),
                {"weight": 50, "preference": _in(ZONE_LABEL, zones)},
            ]
        }
    }
    executor = _pod(group, "executor", EXECUTOR_CONTAINER, executor_affinity)
    driver = _pod(group, "driver", DRIVER_CONTAINER, driver_affinity)
    claims: tuple[dict[str, Any], ...] = ()
    gpu_conf: dict[str, str] = {}
    if gpus_per_executor and devices is DeviceMode.dra:
        template = f"{group}-executor-gpus"
        labels = {GROUP_LABEL: group}
        claims = (claim_template(template, gpus_per_executor, GPU_DEVICE_CLASS, labels=labels),)
        executor["spec"] = claim_pod_spec(executor["spec"], template)
    elif gpus_per_executor:
        gpu_conf = {
            "spark.executor.resource.gpu.amount": str(gpus_per_executor),
            "spark.executor.resource.gpu.vendor": GPU_VENDOR,
            "spark.executor.resource.gpu.discoveryScript": GPU_DISCOVERY_SCRIPT,
        }
    validate_manifests([executor, driver, *claims], DRA_KUBERNETES_VERSION)

    overhead = executor_overhead_mib(shape.memory_mib, app_kind)
    conf = {
        "spark.executor.instances": str(shape.executors),
        "spark.executor.cores": str(shape.cores),
        "spark.kubernetes.executor.request.cores": str(shape.cores),
        "spark.executor.memory": f"{shape.memory_mib}m",
        "spark.executor.memoryOverhead": f"{overhead}m",
        "spark.kubernetes.executor.podTemplateFile": f"{template_dir}/executor-template.yaml",
        "spark.kubernetes.driver.podTemplateFile": f"{template_dir}/driver-template.yaml",
        "spark.kubernetes.executor.podTemplateContainerName": EXECUTOR_CONTAINER,
        "spark.kubernetes.driver.podTemplateContainerName": DRIVER_CONTAINER,
        "spark.dynamicAllocation.enabled": "true",
        "spark.dynamicAllocation.shuffleTracking.enabled": "true",
        "spark.dynamicAllocation.initialExecutors": str(shape.executors),
        "spark.dynamicAllocation.minExecutors": str(max(1, shape.executors // 4)),
        "spark.dynamicAllocation.maxExecutors": str(shape.executors),
        "spark.locality.wait.rack": "0s",
    }
    if local_dir is not None:
        volume = "spark.kubernetes.executor.volumes.hostPath.spark-local-dir-1"
        conf[f"{volume}.mount.path"] = LOCAL_DIR_MOUNT
        conf[f"{volume}.options.path"] = local_dir
    if scheduler_name is not None:
        if not scheduler_name.strip() or scheduler_name != scheduler_name.strip():
            raise InputError(f"--scheduler-name {scheduler_name!r} is not a scheduler name")
        conf["spark.kubernetes.executor.scheduler.name"] = scheduler_name
    if input_locality:
        conf[f"spark.kubernetes.executor.annotation.{INPUT_LOCALITY_ANNOTATION}"] = input_locality
    conf.update(gpu_conf)
    return SparkSettings(conf, executor, driver, claims)
