"""deploy/: every kustomize overlay renders offline (``kubectl kustomize``) and every
rendered object validates offline.

- Built-in kinds: kubernetes-validate, strict, against the Kubernetes 1.31 schema.
- SchedulingPolicy examples: against the openAPIV3Schema of the CRD as rendered.
- The KubeSchedulerConfiguration inside its ConfigMap, ServiceMonitor and cert-manager's
  Issuer/Certificate: against strict models of the fields used (manifests_support.py,
  shared with the Helm chart's tests, says what they can and cannot catch).
- RBAC is least privilege: the rules grant exactly the (resource, verb) pairs the
  Kubernetes client calls in core/ need, and docs/deploy.md justifies each one.
"""

from __future__ import annotations

import copy
import shutil
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
import yaml

from kubesage.adapters.gpu_training.mig import CATALOGUES
from kubesage.core.errors import InputError
from kubesage.core.k8s.mig_names import KNOWN_MIG_PROFILES, mig_resource_name
from kubesage.core.k8s.policy_source import default_policy_dir
from kubesage.core.k8s.tls import bootstrap
from kubesage.core.k8s.validation import validate_manifests
from tests.deploy.manifests_support import (
    CLIENT_CALLS,
    CRD_KINDS,
    DEPLOY,
    MIG_CONFIG_MAP_CALLS,
    ROOT,
    SPEC_MODELS,
    CustomObject,
    KubeSchedulerConfiguration,
    called_client_methods,
    find,
    granted,
    kustomize,
)

OVERLAYS = ("cert-manager", "self-signed")


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """Every overlay rendered; self-signed from a copy whose tls/ holds a fresh bootstrap."""
    copy_root = tmp_path_factory.mktemp("deploy")
    shutil.copytree(DEPLOY, copy_root / "deploy")
    bootstrap("kubesage", "kubesage").write(copy_root / "deploy/overlays/self-signed/tls")
    return {
        "base": kustomize(DEPLOY / "base"),
        "cert-manager": kustomize(DEPLOY / "overlays/cert-manager"),
        "self-signed": kustomize(copy_root / "deploy/overlays/self-signed"),
    }


def objects(rendered: dict[str, list[dict[str, Any]]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for overlay, docs in rendered.items():
        for doc in docs:
            yield overlay, doc


# --- built-in kinds ----------------------------------------------------------------------


def test_every_builtin_object_validates_strictly(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    checked = 0
    for _, doc in objects(rendered):
        if (doc["apiVersion"], doc["kind"]) not in CRD_KINDS:
            validate_manifests([doc])
            checked += 1
    assert checked >= 30


def test_the_validator_rejects_a_broken_deployment(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    deployment = copy.deepcopy(find(rendered["cert-manager"], "Deployment"))
    deployment["spec"]["template"]["spec"]["containers"][0]["imagePolicy"] = "Always"
    with pytest.raises(InputError, match="Deployment 'kubesage'"):
        validate_manifests([deployment])


def test_overlays_render_the_expected_objects(rendered: dict[str, list[dict[str, Any]]]) -> None:
    for overlay in OVERLAYS:
        kinds = {doc["kind"] for doc in rendered[overlay]}
        assert {
            "Namespace",
            "CustomResourceDefinition",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "Deployment",
            "Service",
            "MutatingWebhookConfiguration",
            "ConfigMap",
            "ServiceMonitor",
            "PodDisruptionBudget",
        } <= kinds, overlay
    assert {"Certificate", "Issuer"} <= {d["kind"] for d in rendered["cert-manager"]}
    secret = find(rendered["self-signed"], "Secret", "kubesage-webhook-tls")
    assert set(secret["data"]) == {"tls.crt", "tls.key", "ca.crt"}


# --- the webhook, the Deployment and TLS wiring --------------------------------------------


def test_webhook_configuration_fails_open_and_skips_system_namespaces(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    for overlay in OVERLAYS:
        config = find(rendered[overlay], "MutatingWebhookConfiguration")
        (webhook,) = config["webhooks"]
        assert webhook["failurePolicy"] == "Ignore"
        assert webhook["sideEffects"] == "None"
        assert webhook["admissionReviewVersions"] == ["v1"]
        assert 1 <= webhook["timeoutSeconds"] <= 5
        assert webhook["rules"] == [
            {
                "operations": ["CREATE"],
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "resources": ["pods"],
                "scope": "Namespaced",
            }
        ]
        assert webhook["clientConfig"]["service"] == {
            "name": "kubesage",
            "namespace": "kubesage",
            "path": "/mutate",
            "port": 443,
        }
        expressions = webhook["namespaceSelector"]["matchExpressions"]
        skip = next(e for e in expressions if e["key"] == "kubernetes.io/metadata.name")
        assert skip["operator"] == "NotIn"
        assert {"kube-system", "kubesage"} <= set(skip["values"])
    injected = find(rendered["cert-manager"], "MutatingWebhookConfiguration")
    assert injected["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
        "kubesage/kubesage-webhook"
    )
    self_signed = find(rendered["self-signed"], "MutatingWebhookConfiguration")
    secret = find(rendered["self-signed"], "Secret", "kubesage-webhook-tls")
    bundle = self_signed["webhooks"][0]["clientConfig"]["caBundle"]
    assert "".join(bundle.split()) == "".join(secret["data"]["ca.crt"].split())


def test_cert_manager_certificate_names_the_service(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    docs = rendered["cert-manager"]
    serving = find(docs, "Certificate", "kubesage-webhook")
    service = find(docs, "Service", "kubesage")
    dns = f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"
    assert dns in serving["spec"]["dnsNames"]
    deployment = find(docs, "Deployment")
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    assert {"name": "tls", "secret": {"secretName": serving["spec"]["secretName"]}} in volumes


def test_deployment_runs_two_hardened_replicas_of_serve(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    deployment = find(rendered["cert-manager"], "Deployment")
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["kubesage"]
    assert container["args"][0] == "serve"
    assert "--scheduler-name=kubesage" in container["args"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    for probe in ("readinessProbe", "startupProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"] == "/healthz"
    # /healthz waits for the first sync: liveness must not restart a replica still in it.
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300
    assert container["resources"]["requests"] and container["resources"]["limits"]
    assert pod["serviceAccountName"] == "kubesage"
    env = {e["name"] for e in container["env"]}
    assert {"POD_NAME", "POD_NAMESPACE"} <= env


# --- kinds without an offline schema: strict models of the fields used -----------------


def test_scheduler_configuration_has_the_extender_entry(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    config_map = find(rendered["cert-manager"], "ConfigMap", "kubesage-scheduler-config")
    config = KubeSchedulerConfiguration.model_validate(
        yaml.safe_load(config_map["data"]["config.yaml"])
    )
    (extender,) = config.extenders
    service = find(rendered["cert-manager"], "Service", "kubesage")
    port = service["spec"]["ports"][0]["port"]
    assert extender.urlPrefix == f"https://kubesage.kubesage.svc:{port}/scheduler"
    assert (extender.filterVerb, extender.prioritizeVerb, extender.bindVerb) == (
        "filter",
        "prioritize",
        "bind",
    )
    # Upstream validation: a prioritizing extender needs a positive weight.
    assert extender.weight > 0
    assert extender.nodeCacheCapable and extender.ignorable and extender.enableHTTPS
    names = [resource.name for resource in extender.managedResources]
    # kube-scheduler sends the extender only pods asking for a listed resource: every
    # MIG profile kubesage knows is listed, the GPU adapter's catalogues' included.
    assert set(names) == {"nvidia.com/gpu"} | {mig_resource_name(p) for p in KNOWN_MIG_PROFILES}
    assert {p.name for c in CATALOGUES.values() for p in c.profiles} <= set(KNOWN_MIG_PROFILES)
    assert len(names) == len(set(names))
    profile_names = [profile.schedulerName for profile in config.profiles]
    # A second kube-scheduler profile, distinct from kubesage's own secondary scheduler.
    assert profile_names and "kubesage" not in profile_names
    assert config.leaderElection is not None and config.leaderElection.leaderElect


def test_operator_objects_match_their_api_shapes(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    seen = set()
    for _, doc in objects(rendered):
        if (doc["apiVersion"], doc["kind"]) in CRD_KINDS:
            obj = CustomObject.model_validate(doc)
            assert obj.metadata.get("namespace") == "kubesage", doc["metadata"]
            SPEC_MODELS[doc["kind"]].model_validate(obj.spec)
            seen.add(doc["kind"])
    assert seen == {"ServiceMonitor", "Certificate", "Issuer"}
    monitor = find(rendered["cert-manager"], "ServiceMonitor")
    service = find(rendered["cert-manager"], "Service")
    assert monitor["spec"]["endpoints"][0]["port"] in [p["name"] for p in service["spec"]["ports"]]
    assert all(
        service["metadata"]["labels"].get(k) == v
        for k, v in monitor["spec"]["selector"]["matchLabels"].items()
    )


def test_example_policies_validate_against_the_rendered_crd(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    crd = find(rendered["cert-manager"], "CustomResourceDefinition")
    (version,) = crd["spec"]["versions"]
    assert crd["spec"]["group"] == "kubesage.io" and version["name"] == "v1alpha1"
    validator = jsonschema.Draft202012Validator(version["schema"]["openAPIV3Schema"])
    examples = sorted(default_policy_dir().glob("*.yaml"))
    assert len(examples) >= 3
    for path in examples:
        document = yaml.safe_load(path.read_text())
        assert document["apiVersion"] == f"{crd['spec']['group']}/{version['name']}"
        assert document["kind"] == crd["spec"]["names"]["kind"]
        validator.validate(document)
    broken = yaml.safe_load(examples[0].read_text())
    broken["spec"]["priority"] = "high"
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(broken)


# --- RBAC: exactly what the code calls, each rule documented -------------------------------


def test_rbac_grants_exactly_what_the_code_calls(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    called = called_client_methods()
    unknown = called - CLIENT_CALLS.keys()
    assert not unknown, f"add the RBAC these calls need (and CLIENT_CALLS): {sorted(unknown)}"
    needed = set().union(*(CLIENT_CALLS[name] for name in called - MIG_CONFIG_MAP_CALLS))
    assert granted(rendered["cert-manager"]) == needed


def test_leases_are_namespaced_and_named(rendered: dict[str, list[dict[str, Any]]]) -> None:
    role = find(rendered["cert-manager"], "Role", "kubesage-leader-election")
    assert role["metadata"]["namespace"] == "kubesage"
    named = [r for r in role["rules"] if "resourceNames" in r]
    assert named and set(named[0]["verbs"]) == {"get", "update"}
    cluster_role = find(rendered["cert-manager"], "ClusterRole", "kubesage")
    assert all("leases" not in r["resources"] for r in cluster_role["rules"])


def test_every_rbac_rule_is_justified_in_the_docs(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    docs = (ROOT / "docs" / "deploy.md").read_text()
    rows = [line for line in docs.splitlines() if line.startswith("|")]
    for group, resource, verb in granted(rendered["cert-manager"]):
        matching = [
            row
            for row in rows
            if f"`{resource}`" in row and f"`{verb}`" in row and f"`{group or 'core'}`" in row
        ]
        assert matching, f"docs/deploy.md has no RBAC row for {group or 'core'} {resource} {verb}"
