"""Builders of v1 Pod and Node JSON as the API server and kube-scheduler send them.

Shapes follow ``kubectl get pod -o json`` after API-server defaulting (uid,
resourceVersion, terminationMessagePath, dnsPolicy, tolerations...), so tests see
the real field set, not a minimal dictionary. Also :func:`running_sync`, the
informer over the fake API server, started and listed.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kubesage.core.k8s.informer import ClusterSync
from tests.fakes.apiserver import FakeApiServer


def v1_node(
    name: str,
    *,
    cpu: str = "96",
    memory: str = "754Gi",
    gpus: int = 8,
    product: str | None = "NVIDIA-H100-80GB-HBM3",
    zone: str | None = "us-east-1a",
    rack: str | None = None,
    mig: dict[str, int] | None = None,
    extra_labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A v1 Node; ``mig`` maps profile names to instance counts (mixed strategy)."""
    labels = {
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "p5.48xlarge" if gpus else "m6i.24xlarge",
    }
    allocatable = {
        "cpu": cpu,
        "ephemeral-storage": "1844020486218",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": memory,
        "pods": "110",
    }
    if gpus:
        if product:
            labels["nvidia.com/gpu.product"] = product
        labels["nvidia.com/gpu.count"] = str(gpus)
        labels["nvidia.com/gpu.memory"] = "81559"
        allocatable["nvidia.com/gpu"] = "0" if mig else str(gpus)
    for profile, count in (mig or {}).items():
        allocatable[f"nvidia.com/mig-{profile}"] = str(count)
    if mig:
        labels["nvidia.com/mig.strategy"] = "mixed"
    if zone:
        labels["topology.kubernetes.io/zone"] = zone
    if rack:
        labels["kubesage.io/rack"] = rack
    labels.update(extra_labels or {})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, name)),
            "resourceVersion": "48213",
            "creationTimestamp": "2026-11-01T08:00:00Z",
            "labels": labels,
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"podCIDR": "10.244.1.0/24", "providerID": f"aws:///us-east-1a/i-{name}"},
        "status": {
            "capacity": dict(allocatable),
            "allocatable": allocatable,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                    "lastHeartbeatTime": "2026-11-30T01:00:00Z",
                    "lastTransitionTime": "2026-11-01T08:01:00Z",
                }
            ],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.10"}],
            "nodeInfo": {
                "kubeletVersion": "v1.31.2",
                "containerRuntimeVersion": "containerd://1.7.22",
                "architecture": "amd64",
                "operatingSystem": "linux",
            },
        },
    }


def v1_container(
    name: str = "main",
    *,
    requests: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    restart_policy: str | None = None,
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    container: dict[str, Any] = {
        "name": name,
        "image": "nvcr.io/nvidia/pytorch:24.10-py3",
        "command": ["torchrun", "train.py"],
        "resources": resources,
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
    }
    if restart_policy:
        container["restartPolicy"] = restart_policy
    return container


def v1_pod(
    name: str = "trainer-0",
    *,
    namespace: str = "ml",
    containers: list[dict[str, Any]] | None = None,
    init_containers: list[dict[str, Any]] | None = None,
    annotations: dict[str, str] | None = None,
    node_selector: dict[str, str] | None = None,
    overhead: dict[str, str] | None = None,
    priority: int | None = 0,
    scheduler_name: str = "default-scheduler",
) -> dict[str, Any]:
    """A pending v1 Pod; one ``main`` container asking 4 CPUs and 16Gi unless given."""
    spec: dict[str, Any] = {
        "containers": containers or [v1_container(requests={"cpu": "4", "memory": "16Gi"})],
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "schedulerName": scheduler_name,
        "securityContext": {},
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
        "tolerations": [
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            }
        ],
    }
    if priority is not None:
        spec["priority"] = priority
    if init_containers:
        spec["initContainers"] = init_containers
    if node_selector:
        spec["nodeSelector"] = node_selector
    if overhead:
        spec["overhead"] = overhead
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{namespace}/{name}")),
            "resourceVersion": "51877",
            "creationTimestamp": "2026-11-30T01:59:00Z",
            "labels": {"app": "trainer"},
            "annotations": annotations or {},
        },
        "spec": spec,
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    }


@contextmanager
def running_sync(fake: FakeApiServer) -> Iterator[ClusterSync]:
    """A ClusterSync over ``fake`` (fast retries), listed and watching; stopped after."""
    sync = ClusterSync(fake.client(), backoff_s=0.02, max_backoff_s=0.1)
    sync.start()
    try:
        assert sync.wait_until_ready(10)
        yield sync
    finally:
        sync.stop()
