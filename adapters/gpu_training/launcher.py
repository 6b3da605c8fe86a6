"""Turn a gang placement into something that runs: Kubernetes manifests or torchrun commands.

Kubernetes: one ``batch/v1`` Job per node of the placement, each pinned to its node
(``kubernetes.io/hostname``), asking for its GPUs (``nvidia.com/gpu``) or its MIG
slice (``nvidia.com/mig-<profile>``), with the torchrun rendezvous in the
environment — ``MASTER_ADDR`` (rank 0's stable DNS name through a headless
Service), ``MASTER_PORT``, ``NNODES``, ``NODE_RANK`` in ring order,
``NPROC_PER_NODE`` — so consecutive ranks sit on the fastest links. Every manifest
is validated offline against the Kubernetes OpenAPI schemas (kubernetes-validate).

Local: the ``torchrun`` command line for each node.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kubesage.core.errors import InputError
from kubesage.core.k8s.validation import validate_manifests

MASTER_PORT = 29500
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@dataclass(frozen=True)
class NodeShare:
    """What one node contributes to the job, in rank order."""

    node: str
    gpus: int
    gpu_indices: tuple[int, ...] = ()
    """Intended GPUs on the node (informational; the device plugin assigns devices)."""


def _check_name(name: str) -> None:
    if len(name) > 52 or not _NAME.match(name):
        raise InputError(
            f"job name '{name}' must be a DNS label of at most 52 characters "
            "(lower-case letters, digits and '-')"
        )


def torchrun_commands(
    shares: Sequence[NodeShare], command: Sequence[str], *, master_addr: str
) -> list[str]:
    """One ``torchrun`` command line per node, in node-rank order."""
    if not command:
        raise InputError("the training command is empty")
    lines = []
    for rank, share in enumerate(shares):
        lines.append(
            shlex.join(
                [
                    "torchrun",
                    f"--nnodes={len(shares)}",
                    f"--nproc-per-node={share.gpus}",
                    f"--node-rank={rank}",
                    f"--master-addr={master_addr}",
                    f"--master-port={MASTER_PORT}",
                    *command,
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
) -> list[dict[str, Any]]:
    """A headless Service and one Job per node, validated; rank 0 is the rendezvous."""
    _check_name(name)
    if not shares:
        raise InputError("the placement has no nodes")
    if not command:
        raise InputError("the training command is empty")
    if mig_profile is not None and any(share.gpus != 1 for share in shares):
        raise InputError("a MIG job takes one MIG slice per node")
    resource = f"nvidia.com/mig-{mig_profile}" if mig_profile else "nvidia.com/gpu"
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
        manifests.append(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {
                    "name": f"{name}-{rank}",
                    "namespace": namespace,
                    "labels": dict(pod_labels),
                    "annotations": {
                        "kubesage.io/gpu-indices": ",".join(map(str, share.gpu_indices)),
                    },
                },
                "spec": {
                    "backoffLimit": 0,
                    "template": {
                        "metadata": {"labels": dict(pod_labels)},
                        "spec": {
                            "restartPolicy": "Never",
                            "hostname": f"{name}-{rank}",
                            "subdomain": service,
                            "nodeSelector": {"kubernetes.io/hostname": share.node},
                            "containers": [
                                {
                                    "name": "trainer",
                                    "image": image,
                                    "command": [*torchrun, *command],
                                    "env": [{"name": k, "value": v} for k, v in env.items()],
                                    "ports": [{"containerPort": MASTER_PORT}],
                                    "resources": {"limits": {resource: str(share.gpus)}},
                                }
                            ],
                        },
                    },
                },
            }
        )
    validate_manifests(manifests)
    return manifests
