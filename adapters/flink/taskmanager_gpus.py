"""TaskManager GPUs for ``kubesage flink submit``, in the form the cluster hands GPUs out.

Flink asks for GPUs through its external-resource framework: ``external-resources: gpu``
with an ``amount`` and the GPU driver (``GPUDriverFactory``), which discovers the GPUs a
TaskManager sees (``nvidia-smi``) and gives operators their indices.

- ``device-plugin``: ``external-resource.gpu.kubernetes.config-key: nvidia.com/gpu`` as
  well, so Flink writes an ``nvidia.com/gpu`` limit into every TaskManager pod it
  creates and the kubelet picks the devices.
- ``dra``: no config-key (Flink then asks Kubernetes for no extended resource); the
  TaskManager pod template (``kubernetes.pod-template-file.taskmanager``) carries a
  ``resourceClaims`` entry made from a ResourceClaimTemplate, one claim per TaskManager
  pod, handed to Flink's main container through ``resources.claims``. The GPU driver
  still discovers the claimed GPUs inside the container. The claim template is an
  object to create in the job's namespace first.

Both take effect where Flink itself creates the TaskManager pods (native Kubernetes:
``-t kubernetes-application`` or a ``kubernetes-session`` cluster); a session cluster
whose TaskManagers already run keeps the resources they started with.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kubesage.core.dra.api import GPU_DEVICE_CLASS
from kubesage.core.dra.claims import DeviceMode, claim_pod_spec, claim_template
from kubesage.core.errors import InputError
from kubesage.core.k8s.validation import DRA_KUBERNETES_VERSION, validate_manifests

MAIN_CONTAINER = "flink-main-container"
"""The container name Flink merges its TaskManager container into, in a pod template."""
GPU_DRIVER_FACTORY = "org.apache.flink.externalresource.gpu.GPUDriverFactory"
DEVICE_PLUGIN_RESOURCE = "nvidia.com/gpu"
POD_TEMPLATE_FILE = "taskmanager-pod-template.yaml"
CLAIM_TEMPLATE_FILE = "gpu-claim-template.yaml"
_NOT_DNS = re.compile(r"[^a-z0-9-]+")


@dataclass(frozen=True)
class TaskManagerGpus:
    """What a submission adds for TaskManager GPUs."""

    conf: dict[str, str]
    """``-D`` options for ``flink run``."""
    files: dict[str, dict[str, Any]]
    """File name → object to write beside each other (DRA: pod and claim templates)."""
    reason: str


def _template_name(job: str) -> str:
    slug = _NOT_DNS.sub("-", job.lower()).strip("-")[:40].strip("-") or "flink"
    return f"{slug}-taskmanager-gpus"


def taskmanager_gpus(
    gpus: int, devices: DeviceMode, *, job: str, template_dir: Path
) -> TaskManagerGpus:
    """Conf (and, with DRA, templates under ``template_dir``) giving each TaskManager
    ``gpus`` GPUs; ``job`` names the claim template."""
    if gpus < 1:
        raise InputError(f"--taskmanager-gpus must be ≥ 1 to ask for GPUs, got {gpus}")
    conf = {
        "external-resources": "gpu",
        "external-resource.gpu.amount": str(gpus),
        "external-resource.gpu.driver-factory.class": GPU_DRIVER_FACTORY,
    }
    if devices is DeviceMode.device_plugin:
        conf["external-resource.gpu.kubernetes.config-key"] = DEVICE_PLUGIN_RESOURCE
        return TaskManagerGpus(
            conf, {}, f"{gpus} GPU(s) per TaskManager through the device plugin (nvidia.com/gpu)"
        )
    name = _template_name(job)
    claim = claim_template(name, gpus, GPU_DEVICE_CLASS)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "taskmanager-pod-template"},
        "spec": claim_pod_spec({"containers": [{"name": MAIN_CONTAINER}]}, name),
    }
    validate_manifests([pod, claim], DRA_KUBERNETES_VERSION)
    pod_file = template_dir.resolve() / POD_TEMPLATE_FILE
    conf["kubernetes.pod-template-file.taskmanager"] = str(pod_file)
    return TaskManagerGpus(
        conf,
        {POD_TEMPLATE_FILE: pod, CLAIM_TEMPLATE_FILE: claim},
        f"{gpus} GPU(s) per TaskManager through DRA: claim template {name} "
        f"({template_dir / CLAIM_TEMPLATE_FILE}, create it in the job's namespace first)",
    )


def write_files(gpus: TaskManagerGpus, template_dir: Path) -> list[Path]:
    """Write ``gpus.files`` under ``template_dir``; the paths written."""
    if not gpus.files:
        return []
    template_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, obj in gpus.files.items():
        path = template_dir / name
        path.write_text(yaml.safe_dump(obj, sort_keys=False))
        written.append(path)
    return written
