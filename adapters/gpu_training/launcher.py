"""Turn a gang placement into something that runs: Kubernetes manifests or torchrun commands.

Kubernetes: one ``batch/v1`` Job per node of the placement, each pinned to its node
(required node affinity on ``metadata.name``: the ``kubernetes.io/hostname`` label may
differ from the node's name), with the torchrun rendezvous in the environment —
``MASTER_ADDR`` (rank 0's stable DNS name through a headless Service),
``MASTER_PORT``, ``NNODES``, ``NODE_RANK`` in ring order, ``NPROC_PER_NODE`` — so
consecutive ranks sit on the fastest links. How a Job asks for its GPUs:

- ``device-plugin``: a limit of ``nvidia.com/gpu`` (or ``nvidia.com/mig-<profile>``, a
  ``+me`` profile's written ``.me`` as the device plugin names it);
  the kubelet hands the container whichever devices it likes, so the chosen GPUs
  (annotation ``kubesage.io/gpu-indices``, in ring order) are only informational;
- ``dra``: one ``resource.k8s.io/v1`` ResourceClaimTemplate per node rank asking for
  exactly those GPUs (CEL selector by UUID where known, else by index; a MIG job asks
  the ``mig.nvidia.com`` class for its profile), referenced by the Job's pod template
  under ``spec.resourceClaims`` and the container's ``resources.claims``; no
  extended-resource limit.

Every manifest is validated offline against the Kubernetes OpenAPI schemas
(kubernetes-validate) at the first version with ``resource.k8s.io/v1``.

Local: the ``torchrun`` command line for each node.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kubesage.core.annotations import GPU_INDICES_ANNOTATION
from kubesage.core.dra.api import GPU_DEVICE_CLASS, MIG_DEVICE_CLASS
from kubesage.core.dra.claims import (
    DeviceMode,
    claim_pod_spec,
    claim_template,
    gpu_selectors,
    mig_selectors,
)
from kubesage.core.errors import InputError
from kubesage.core.k8s.mig_names import mig_resource_name, mig_shape
from kubesage.core.k8s.node_eligibility import on_nodes
from kubesage.core.k8s.translate_errors import TranslateError
from kubesage.core.k8s.v1_models import DNS_LABEL_PATTERN, DNS_SUBDOMAIN_PATTERN
from kubesage.core.k8s.validation import DRA_KUBERNETES_VERSION, validate_manifests

MASTER_PORT = 29500
_NAME = re.compile(DNS_LABEL_PATTERN)


@dataclass(frozen=True)
class NodeShare:
    """What one node contributes to the job, in rank order."""

    node: str
    gpus: int
    gpu_indices: tuple[int, ...] = ()
    """Chosen GPUs on the node, in ring order (with the device plugin only informational)."""
    gpu_uuids: tuple[str, ...] = ()
    """Their UUIDs where known (a DRA claim then selects by UUID, else by index)."""

    def __post_init__(self) -> None:
        if self.gpus < 1:
            raise InputError(f"node {self.node}: gpus must be at least 1, got {self.gpus}")
        if self.gpu_indices and len(self.gpu_indices) != self.gpus:
            raise InputError(
                f"node {self.node}: gpus is {self.gpus} but gpu_indices has "
                f"{len(self.gpu_indices)} entries"
            )


def _check_name(name: str) -> None:
    # It names the headless Service too, whose name is a DNS-1035 label (a letter first).
    if len(name) > 52 or not _NAME.match(name) or not name[0].isalpha():
        raise InputError(
            f"job name '{name}' must be a DNS label of at most 52 characters starting with "
            "a letter (lower-case letters, digits and '-'): it also names the rendezvous "
            "Service"
        )


def _check_namespace(namespace: str) -> None:
    if len(namespace) > 63 or not _NAME.match(namespace):
        raise InputError(
            f"namespace '{namespace}' must be a DNS label of at most 63 characters "
            "(lower-case letters, digits and '-')"
        )


def _check_node(node: str) -> None:
    """A node's name is a DNS subdomain (what the Job's node affinity matches)."""
    if len(node) > 253 or not re.fullmatch(DNS_SUBDOMAIN_PATTERN, node):
        raise InputError(
            f"node name '{node}' is not a Kubernetes node name (a DNS subdomain: lower-case "
            "letters, digits, '-' and '.', at most 253 characters)"
        )


def _check_mig_profile(profile: str) -> None:
    try:
        mig_shape(profile, "--mig-profile")
    except TranslateError as exc:
        raise InputError(str(exc)) from None


def _check_shares(shares: Sequence[NodeShare]) -> None:
    if not shares:
        raise InputError("the placement has no nodes")


def visible_devices(share: NodeShare) -> str:
    """``CUDA_VISIBLE_DEVICES`` for ``share``: its chosen GPUs in ring order, so local
    rank i runs on the i-th GPU of the ring (empty when the GPUs were not chosen). The
    indices are NVML's (PCI bus order), so they go with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``
    (CUDA's own default order is fastest first)."""
    return ",".join(map(str, share.gpu_indices))


def torchrun_program(command: Sequence[str]) -> list[str]:
    """What follows torchrun's own options for the user's ``command``: a ``.py`` script
    (or torchrun options given first) as it is, which torchrun runs with its own Python;
    anything else (``python train.py``, ``python -m pkg``, ``./run.sh``) after
    ``--no-python``, run as typed. torchrun takes its first argument for a script and
    would run ``python -u python train.py`` on every rank."""
    if not command:
        raise InputError("the training command is empty")
    first = command[0]
    if first.startswith("-") or first.endswith(".py"):
        return list(command)
    return ["--no-python", *command]


def torchrun_commands(
    shares: Sequence[NodeShare], command: Sequence[str], *, master_addr: str
) -> list[str]:
    """One ``torchrun`` command line per node, in node-rank order, each limited to the
    node's chosen GPUs in ring order (``env CUDA_DEVICE_ORDER=PCI_BUS_ID
    CUDA_VISIBLE_DEVICES=…``): torchrun gives local rank i the i-th visible GPU."""
    _check_shares(shares)
    program = torchrun_program(command)
    lines = []
    for rank, share in enumerate(shares):
        devices = visible_devices(share)
        lines.append(
            shlex.join(
                [
                    *(
                        ["env", "CUDA_DEVICE_ORDER=PCI_BUS_ID", f"CUDA_VISIBLE_DEVICES={devices}"]
                        if devices
                        else []
                    ),
                    "torchrun",
                    f"--nnodes={len(shares)}",
                    f"--nproc-per-node={share.gpus}",
                    f"--node-rank={rank}",
                    f"--master-addr={master_addr}",
                    f"--master-port={MASTER_PORT}",
                    *program,
                ]
            )
        )
    return lines


def kubernetes_manifests(
    name: str,
    shares: Sequence[NodeShare],
    command: Sequence[str],
    *,
    image: str,
    namespace: str = "default",
    mig_profile: str | None = None,
    devices: DeviceMode = DeviceMode.device_plugin,
) -> list[dict[str, Any]]:
    """A headless Service, with ``dra`` one ResourceClaimTemplate per node, and one Job
    per node, validated; rank 0 is the rendezvous."""
    _check_name(name)
    _check_namespace(namespace)
    _check_shares(shares)
    for share in shares:
        _check_node(share.node)
    program = torchrun_program(command)
    if mig_profile is not None and any(share.gpus != 1 for share in shares):
        raise InputError("a MIG job takes one MIG slice per node")
    if mig_profile is not None:
        _check_mig_profile(mig_profile)
    resource = mig_resource_name(mig_profile) if mig_profile else "nvidia.com/gpu"
    service = f"{name}-rdzv"
    master = f"{name}-0.{service}.{namespace}.svc"
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/managed-by": "kubesage"}
    manifests: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": service, "namespace": namespace, "labels": dict(labels)},
            "spec": {
                "clusterIP": "None",
                "selector": {**labels, "kubesage.io/node-rank": "0"},
                "ports": [{"name": "rendezvous", "port": MASTER_PORT}],
            },
        }
    ]
    claims: list[dict[str, Any]] = []
    jobs: list[dict[str, Any]] = []
    for rank, share in enumerate(shares):
        env = {
            "MASTER_ADDR": master,
            "MASTER_PORT": str(MASTER_PORT),
            "NNODES": str(len(shares)),
            "NODE_RANK": str(rank),
            "NPROC_PER_NODE": str(share.gpus),
        }
        torchrun = [
            "torchrun",
            f"--nnodes={len(shares)}",
            f"--nproc-per-node={share.gpus}",
            f"--node-rank={rank}",
            f"--master-addr={master}",
            f"--master-port={MASTER_PORT}",
        ]
        pod_labels = {**labels, "kubesage.io/node-rank": str(rank)}
        container: dict[str, Any] = {
            "name": "trainer",
            "image": image,
            "command": [*torchrun, *program],
            "env": [{"name": k, "value": v} for k, v in env.items()],
            "ports": [{"containerPort": MASTER_PORT}],
        }
        pod_spec: dict[str, Any] = {
            "restartPolicy": "Never",
            "hostname": f"{name}-{rank}",
            "subdomain": service,
            "affinity": on_nodes([share.node]),
            "containers": [container],
        }
        if devices is DeviceMode.dra:
            template = f"{name}-{rank}-gpus"
            claims.append(_claim_template(template, share, mig_profile, namespace, pod_labels))
            pod_spec = claim_pod_spec(pod_spec, template)
        else:
            container["resources"] = {"limits": {resource: str(share.gpus)}}
        indices = {GPU_INDICES_ANNOTATION: ",".join(map(str, share.gpu_indices))}
        jobs.append(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {
                    "name": f"{name}-{rank}",
                    "namespace": namespace,
                    "labels": dict(pod_labels),
                    "annotations": dict(indices),
                },
                "spec": {
                    "backoffLimit": 0,
                    # on the pod too: the downward API can hand the ring order to the trainer
                    "template": {
                        "metadata": {"labels": dict(pod_labels), "annotations": dict(indices)},
                        "spec": pod_spec,
                    },
                },
            }
        )
    manifests += [*claims, *jobs]
    validate_manifests(manifests, DRA_KUBERNETES_VERSION)
    return manifests


def _claim_template(
    name: str,
    share: NodeShare,
    mig_profile: str | None,
    namespace: str,
    labels: dict[str, str],
) -> dict[str, Any]:
    """The claim template asking for exactly ``share``'s GPUs (or its MIG device)."""
    if mig_profile is not None:
        selectors = mig_selectors(
            mig_profile,
            parent_uuid=share.gpu_uuids[0] if share.gpu_uuids else None,
            parent_index=share.gpu_indices[0] if share.gpu_indices else None,
        )
        return claim_template(
            name, 1, MIG_DEVICE_CLASS, selectors, namespace=namespace, labels=labels
        )
    if share.gpu_uuids and len(share.gpu_uuids) != share.gpus:
        raise InputError(f"node {share.node}: {share.gpus} GPUs but {len(share.gpu_uuids)} UUIDs")
    if share.gpu_indices and len(share.gpu_indices) != share.gpus:
        raise InputError(
            f"node {share.node}: {share.gpus} GPUs but {len(share.gpu_indices)} indices"
        )
    # Sorted: a selector picks a set; the ring order is the Job's annotation.
    selectors = gpu_selectors(sorted(share.gpu_indices), sorted(share.gpu_uuids))
    return claim_template(
        name, share.gpus, GPU_DEVICE_CLASS, selectors, namespace=namespace, labels=labels
    )
