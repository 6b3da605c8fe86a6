"""What the kustomize tests (test_manifests.py) and the Helm chart tests (test_helm_chart.py)
share: rendering with ``kubectl kustomize``, offline validation, strict models of the
kinds that ship no offline schema, and the RBAC bookkeeping.

- Built-in kinds: kubernetes-validate, strict (``kubesage.core.k8s.validation.validate_manifests``).
- The KubeSchedulerConfiguration inside its ConfigMap, ServiceMonitor and cert-manager's
  Issuer/Certificate have no schema that ships offline (kubernetes-validate knows only
  built-in kinds; the operators' CRDs are not vendored here). They are checked against
  strict models of the fields this repository uses, transcribed from the upstream API
  references (kubescheduler.config.k8s.io/v1 types, monitoring.coreos.com/v1,
  cert-manager.io/v1): a misspelt or misplaced field fails, but defaulting and the
  operators' own cross-field validation cannot be checked without their API servers.
- RBAC: :data:`CLIENT_CALLS` maps each Kubernetes client method the code calls to the
  (apiGroup, resource, verb) it needs; :func:`called_client_methods` finds the calls.
"""

from __future__ import annotations

import inspect
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import kubernetes.client
import pytest
import yaml
from pydantic import BaseModel, ConfigDict, Field

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
CRD_KINDS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("cert-manager.io/v1", "Certificate"),
    ("cert-manager.io/v1", "Issuer"),
}
"""Custom kinds the manifests use whose CRDs are not installed here (see the models)."""


def ci() -> bool:
    """True on CI, where a missing tool fails the deploy tests instead of skipping them."""
    return os.environ.get("CI", "").lower() == "true"


def kubectl() -> str:
    path = shutil.which("kubectl")
    if path is None:
        if ci():
            pytest.fail(
                "kubectl is not installed: the deploy tests render with `kubectl kustomize`"
            )
        pytest.skip("kubectl is not installed (needed for `kubectl kustomize`)")
    return path


def kustomize(directory: Path) -> list[dict[str, Any]]:
    """The objects ``kubectl kustomize directory`` renders."""
    result = subprocess.run(
        [kubectl(), "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"kubectl kustomize {directory} failed:\n{result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def find(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    matches = [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    assert len(matches) == 1, f"{kind} {name}: {len(matches)} found"
    return matches[0]


# --- kinds without an offline schema: strict models of the fields used -----------------


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ManagedResource(Strict):
    name: str = Field(pattern=r"^[a-z0-9.-]+/[a-z0-9.+-]+$")
    ignoredByScheduler: bool = False  # noqa: N815 - the Go JSON names


class ExtenderTls(Strict):
    insecure: bool = False
    serverName: str | None = None  # noqa: N815
    certFile: str | None = None  # noqa: N815
    keyFile: str | None = None  # noqa: N815
    caFile: str | None = None  # noqa: N815
    certData: str | None = None  # noqa: N815
    keyData: str | None = None  # noqa: N815
    caData: str | None = None  # noqa: N815


class Extender(Strict):
    """``Extender`` of k8s.io/kube-scheduler/config/v1 (JSON names as in types.go)."""

    urlPrefix: str = Field(pattern=r"^https?://")  # noqa: N815
    filterVerb: str | None = None  # noqa: N815
    preemptVerb: str | None = None  # noqa: N815
    prioritizeVerb: str | None = None  # noqa: N815
    weight: int = 0
    bindVerb: str | None = None  # noqa: N815
    enableHTTPS: bool = False  # noqa: N815
    tlsConfig: ExtenderTls | None = None  # noqa: N815
    httpTimeout: str | None = Field(default=None, pattern=r"^[0-9]+(ms|s|m)$")  # noqa: N815
    nodeCacheCapable: bool = False  # noqa: N815
    managedResources: list[ManagedResource] = []  # noqa: N815
    ignorable: bool = False


class Profile(Strict):
    schedulerName: str  # noqa: N815
    percentageOfNodesToScore: int | None = None  # noqa: N815
    plugins: dict[str, Any] | None = None
    pluginConfig: list[dict[str, Any]] | None = None  # noqa: N815


class LeaderElection(Strict):
    leaderElect: bool  # noqa: N815
    leaseDuration: str | None = None  # noqa: N815
    renewDeadline: str | None = None  # noqa: N815
    retryPeriod: str | None = None  # noqa: N815
    resourceLock: str | None = None  # noqa: N815
    resourceName: str | None = None  # noqa: N815
    resourceNamespace: str | None = None  # noqa: N815


class KubeSchedulerConfiguration(Strict):
    apiVersion: Literal["kubescheduler.config.k8s.io/v1"]  # noqa: N815
    kind: Literal["KubeSchedulerConfiguration"]
    leaderElection: LeaderElection | None = None  # noqa: N815
    clientConnection: dict[str, Any] | None = None  # noqa: N815
    parallelism: int | None = None
    percentageOfNodesToScore: int | None = None  # noqa: N815
    podInitialBackoffSeconds: int | None = None  # noqa: N815
    podMaxBackoffSeconds: int | None = None  # noqa: N815
    profiles: list[Profile] = []
    extenders: list[Extender] = []


class SecretKey(Strict):
    name: str
    key: str


class SafeTlsConfig(Strict):
    serverName: str | None = None  # noqa: N815
    ca: dict[Literal["secret", "configMap"], SecretKey] | None = None
    insecureSkipVerify: bool | None = None  # noqa: N815


class Endpoint(Strict):
    port: str
    path: str = "/metrics"
    scheme: Literal["http", "https"] = "http"
    interval: str | None = Field(default=None, pattern=r"^[0-9]+(ms|s|m|h)$")
    tlsConfig: SafeTlsConfig | None = None  # noqa: N815


class LabelSelectorModel(Strict):
    matchLabels: dict[str, str] = {}  # noqa: N815
    matchExpressions: list[dict[str, Any]] = []  # noqa: N815


class ServiceMonitorSpec(Strict):
    selector: LabelSelectorModel
    endpoints: list[Endpoint] = Field(min_length=1)
    namespaceSelector: dict[str, Any] | None = None  # noqa: N815
    jobLabel: str | None = None  # noqa: N815


class IssuerRef(Strict):
    name: str
    kind: Literal["Issuer", "ClusterIssuer"] = "Issuer"
    group: str | None = None


class PrivateKey(Strict):
    algorithm: Literal["RSA", "ECDSA", "Ed25519"]
    size: int | None = None
    rotationPolicy: Literal["Never", "Always"] | None = None  # noqa: N815
    encoding: Literal["PKCS1", "PKCS8"] | None = None


class CertificateSpec(Strict):
    secretName: str  # noqa: N815
    issuerRef: IssuerRef  # noqa: N815
    isCA: bool | None = None  # noqa: N815
    commonName: str | None = None  # noqa: N815
    dnsNames: list[str] | None = None  # noqa: N815
    duration: str | None = Field(default=None, pattern=r"^[0-9]+(h|m|s)$")
    renewBefore: str | None = Field(default=None, pattern=r"^[0-9]+(h|m|s)$")  # noqa: N815
    usages: list[
        Literal["server auth", "client auth", "digital signature", "key encipherment"]
    ] = []
    privateKey: PrivateKey | None = None  # noqa: N815


class IssuerSpec(Strict):
    selfSigned: dict[str, Any] | None = None  # noqa: N815
    ca: dict[Literal["secretName"], str] | None = None


class CustomObject(Strict):
    apiVersion: str  # noqa: N815
    kind: str
    metadata: dict[str, Any]
    spec: dict[str, Any]


SPEC_MODELS: dict[str, type[Strict]] = {
    "ServiceMonitor": ServiceMonitorSpec,
    "Certificate": CertificateSpec,
    "Issuer": IssuerSpec,
}


def validate_custom(doc: Mapping[str, Any]) -> CustomObject:
    """Check a ServiceMonitor, Certificate or Issuer against its strict model."""
    obj = CustomObject.model_validate(doc)
    SPEC_MODELS[obj.kind].model_validate(obj.spec)
    return obj


def scheduler_configuration(config_map: Mapping[str, Any]) -> KubeSchedulerConfiguration:
    """The KubeSchedulerConfiguration in a ConfigMap's ``config.yaml``, checked."""
    return KubeSchedulerConfiguration.model_validate(
        yaml.safe_load(config_map["data"]["config.yaml"])
    )


# --- RBAC: exactly what the code calls -------------------------------------------------

CLIENT_CALLS: dict[str, set[tuple[str, str, str]]] = {
    # method of the kubernetes client -> (apiGroup, resource, verb) it needs
    "list_node": {("", "nodes", "list"), ("", "nodes", "watch")},  # informer: list + watch=True
    "list_pod_for_all_namespaces": {("", "pods", "list"), ("", "pods", "watch")},
    "list_namespace": {("", "namespaces", "list"), ("", "namespaces", "watch")},
    "read_namespaced_pod": {("", "pods", "get")},
    "list_namespaced_pod": {("", "pods", "list")},  # the bind actuator's replacements
    "create_namespaced_pod_binding": {("", "pods/binding", "create")},
    "create_namespaced_binding": {("", "bindings", "create")},
    "create_namespaced_event": {("", "events", "create")},
    # The secondary scheduler's PodScheduled=False/Unschedulable (the Cluster Autoscaler's cue)
    "patch_namespaced_pod_status": {("", "pods/status", "patch")},
    "read_namespaced_lease": {("coordination.k8s.io", "leases", "get")},
    "create_namespaced_lease": {("coordination.k8s.io", "leases", "create")},
    "replace_namespaced_lease": {("coordination.k8s.io", "leases", "update")},
    "list_cluster_custom_object": {("kubesage.io", "schedulingpolicies", "list")},
    "create_namespaced_pod_eviction": {("", "pods/eviction", "create")},
    "list_namespaced_pod_disruption_budget": {("policy", "poddisruptionbudgets", "list")},
    "read_node": {("", "nodes", "get")},  # LiveNodeLabeler: the config label before a change
    "patch_node": {("", "nodes", "patch")},
    "patch_namespaced_job": {("batch", "jobs", "patch")},
    "get_namespaced_custom_object": {("kubeflow.org", "pytorchjobs", "get")},
    # LivePatcher: the loop's Patch actions (gpu-gang's PyTorchJob replicas). A
    # FlinkDeployment is patched by `kubesage flink autoscale --flink-deployment`, which
    # runs with its user's kubeconfig, not kubesage's ServiceAccount.
    "patch_namespaced_custom_object": {("kubeflow.org", "pytorchjobs", "patch")},
    # resource.k8s.io (Dynamic Resource Allocation)
    "list_resource_slice": {  # informer: list + watch; ClaimAllocator: one node's slices
        ("resource.k8s.io", "resourceslices", "list"),
        ("resource.k8s.io", "resourceslices", "watch"),
    },
    "list_resource_claim_for_all_namespaces": {  # informer: list + watch; ClaimAllocator
        ("resource.k8s.io", "resourceclaims", "list"),
        ("resource.k8s.io", "resourceclaims", "watch"),
    },
    "read_namespaced_resource_claim": {("resource.k8s.io", "resourceclaims", "get")},
    "replace_namespaced_resource_claim": {("resource.k8s.io", "resourceclaims", "update")},
    "replace_namespaced_resource_claim_status": {
        ("resource.k8s.io", "resourceclaims/status", "update")
    },
    "read_device_class": {("resource.k8s.io", "deviceclasses", "get")},
    # core/k8s/mig_config_map.py: MIG Manager's ConfigMap, only with --mig-config-map
    "read_namespaced_config_map": {("", "configmaps", "get")},
    "replace_namespaced_config_map": {("", "configmaps", "update")},
    # Discovery (GET /apis): system:discovery lets every authenticated user read it.
    "get_api_versions": set(),
}

MIG_CONFIG_MAP_CALLS = {"read_namespaced_config_map", "replace_namespaced_config_map"}
"""Calls made only with ``--mig-config-map``: the chart grants them (on that one
ConfigMap) only when ``loop.migConfigMap`` is set, the kustomize base never (an opt-in
patch, docs/deploy.md)."""


def client_methods() -> set[str]:
    names: set[str] = set()
    for name, cls in inspect.getmembers(kubernetes.client, inspect.isclass):
        if name.endswith("Api") and name != "ApiClient":
            names |= {m for m in dir(cls) if not m.startswith("_")}
    return names


def client_calls_by_file() -> dict[str, set[Path]]:
    """Each Kubernetes client method called in core/, with the files that call it."""
    known = client_methods()
    calls: dict[str, set[Path]] = {}
    for path in (ROOT / "core").rglob("*.py"):
        for match in re.finditer(r"\.([a-z_]+)\b", path.read_text()):
            if match.group(1) in known and re.match(
                r"(get|list|read|create|replace|patch|delete|connect)_", match.group(1)
            ):
                calls.setdefault(match.group(1), set()).add(path.relative_to(ROOT))
    return calls


def called_client_methods() -> set[str]:
    return set(client_calls_by_file())


def needed(methods: Iterable[str]) -> set[tuple[str, str, str]]:
    """The (apiGroup, resource, verb) pairs ``methods`` need."""
    return set().union(*(CLIENT_CALLS[name] for name in methods))


def granted(docs: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    pairs = set()
    for doc in docs:
        if doc["kind"] in ("ClusterRole", "Role"):
            for rule in doc["rules"]:
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        for verb in rule["verbs"]:
                            assert "*" not in (group, resource, verb), rule
                            pairs.add((group, resource, verb))
    return pairs


def rbac_rows_missing(docs_text: str, pairs: Iterable[tuple[str, str, str]]) -> list[str]:
    """The granted pairs without a row in a Markdown RBAC table of ``docs_text``."""
    rows = [line for line in docs_text.splitlines() if line.startswith("|")]
    missing = []
    for group, resource, verb in sorted(pairs):
        if not any(
            f"`{resource}`" in row and f"`{verb}`" in row and f"`{group or 'core'}`" in row
            for row in rows
        ):
            missing.append(f"{group or 'core'} {resource} {verb}")
    return missing
