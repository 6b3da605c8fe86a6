"""deploy/helm/kubesage renders the objects of the kustomize overlays: the default values
those of ``self-signed`` and ``tls.source=certManager`` those of ``cert-manager`` (see
:func:`normalised` for exactly what is normalised), and the comparison still sees a real
difference."""

from __future__ import annotations

import base64
import copy
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from kubesage.core.k8s.tls import TlsBundle, bootstrap
from tests.deploy.helm_support import pem_values, render, serve_options
from tests.deploy.manifests_support import DEPLOY, kustomize

HELM_LABELS = frozenset(
    {
        "helm.sh/chart",
        "app.kubernetes.io/managed-by",
        "app.kubernetes.io/instance",
        "app.kubernetes.io/version",
    }
)
HELM_ANNOTATIONS = frozenset({"helm.sh/resource-policy"})
OVERLAY_KINDS = frozenset({"Secret", "Issuer", "Certificate"})
TLS_PLACEHOLDER = "<tls material>"


def _drop_helm_labels(node: Any, *, labels: bool = False) -> Any:
    """``node`` without :data:`HELM_LABELS` in any label map (``labels``,
    ``matchLabels``, a Service's ``selector``) at any depth."""
    if isinstance(node, dict):
        return {
            key: _drop_helm_labels(value, labels=key in ("labels", "matchLabels", "selector"))
            for key, value in node.items()
            if not (labels and key in HELM_LABELS)
        }
    if isinstance(node, list):
        return [_drop_helm_labels(item) for item in node]
    return node


def normalised(doc: dict[str, Any], *, tls_material: bool = True) -> dict[str, Any]:
    """``doc`` without what differs only because Helm or kustomize rendered it:

    - Helm's bookkeeping labels (:data:`HELM_LABELS`: chart, managed-by, instance,
      version) wherever labels are (metadata, pod template, selectors, the
      anti-affinity term): Helm conventions, and `instance` keeps two releases' pods
      apart, which a kustomize tree has no notion of;
    - the annotation ``helm.sh/resource-policy: keep`` (Namespace, CRD): tells Helm not
      to delete them on uninstall, not an API field;
    - labels of the objects the overlays add (:data:`OVERLAY_KINDS`: the TLS Secret,
      cert-manager's Issuers and Certificates): the base's ``labels:`` transformer does
      not reach an overlay's generated or listed resources, so kustomize leaves them
      unlabelled while the chart labels every object;
    - the KubeSchedulerConfiguration text: compared parsed (comments and layout aside);
    - the container's ``args``: compared as the options ``kubesage serve`` parses from
      them, so passing a default explicitly (the chart's ``--policy=fgd``,
      ``--log-level=info``) equals leaving it out;
    - TLS material (Secret data, caBundle) is compared decoded, since kustomize wraps
      base64 lines; with ``tls_material`` not at all: a generated CA and key are random
      per render (the TLS tests check that they are consistent and serve the Service).
    """
    doc = _drop_helm_labels(copy.deepcopy(doc))
    metadata = doc["metadata"]
    annotations = {
        k: v for k, v in metadata.pop("annotations", {}).items() if k not in HELM_ANNOTATIONS
    }
    if annotations:
        metadata["annotations"] = annotations
    if doc["kind"] in OVERLAY_KINDS:
        metadata.pop("labels", None)
    if not metadata.get("labels", True):
        metadata.pop("labels")
    if doc["kind"] == "ConfigMap":
        doc["data"] = {k: yaml.safe_load(v) for k, v in doc["data"].items()}
    if doc["kind"] == "Deployment":
        for c in doc["spec"]["template"]["spec"]["containers"]:
            c["args"] = serve_options(c["args"])
    if doc["kind"] == "Secret":
        doc["data"] = {k: tls_bytes(v, tls_material) for k, v in doc["data"].items()}
    if doc["kind"] == "MutatingWebhookConfiguration":
        for webhook in doc["webhooks"]:
            client = webhook["clientConfig"]
            if "caBundle" in client:
                client["caBundle"] = tls_bytes(client["caBundle"], tls_material)
    return doc


def tls_bytes(encoded: str, placeholder: bool) -> str | bytes:
    """Base64 TLS material as its bytes (kustomize wraps the base64 text, Helm does not),
    or the placeholder."""
    return TLS_PLACEHOLDER if placeholder else base64.b64decode("".join(encoded.split()))


def by_name(docs: list[dict[str, Any]], **options: bool) -> dict[tuple[str, str], Any]:
    return {(d["kind"], d["metadata"]["name"]): normalised(d, **options) for d in docs}


def assert_same_objects(
    helm_docs: list[dict[str, Any]], kustomize_docs: list[dict[str, Any]], **options: bool
) -> None:
    chart, overlay = by_name(helm_docs, **options), by_name(kustomize_docs, **options)
    assert sorted(chart) == sorted(overlay)
    for key, expected in overlay.items():
        assert chart[key] == expected, key


@pytest.fixture(scope="module")
def self_signed_overlay(tmp_path_factory: pytest.TempPathFactory) -> tuple[TlsBundle, Path]:
    """A copy of deploy/ whose self-signed overlay holds a fresh bootstrap."""
    root = tmp_path_factory.mktemp("deploy")
    shutil.copytree(DEPLOY, root / "deploy", ignore=shutil.ignore_patterns("helm"))
    bundle = bootstrap("kubesage", "kubesage")
    bundle.write(root / "deploy/overlays/self-signed/tls")
    return bundle, root / "deploy/overlays/self-signed"


def test_default_values_render_the_self_signed_overlay(
    helm: ModuleType, self_signed_overlay: tuple[TlsBundle, Path]
) -> None:
    _, overlay = self_signed_overlay
    assert_same_objects(render(helm), kustomize(overlay))


def test_the_same_bundle_renders_the_same_tls_objects_byte_for_byte(
    helm: ModuleType, self_signed_overlay: tuple[TlsBundle, Path]
) -> None:
    bundle, overlay = self_signed_overlay
    docs = render(helm, {"tls": {"selfSigned": pem_values(bundle)}})
    assert_same_objects(docs, kustomize(overlay), tls_material=False)


def test_cert_manager_values_render_the_cert_manager_overlay(helm: ModuleType) -> None:
    assert_same_objects(
        render(helm, {"tls": {"source": "certManager"}}),
        kustomize(DEPLOY / "overlays" / "cert-manager"),
    )


def test_normalising_keeps_real_differences(
    helm: ModuleType, self_signed_overlay: tuple[TlsBundle, Path]
) -> None:
    _, overlay = self_signed_overlay
    kustomized = kustomize(overlay)
    for values in ({"replicas": 3}, {"policy": "bestfit"}, {"webhook": {"timeoutSeconds": 3}}):
        with pytest.raises(AssertionError):
            assert_same_objects(render(helm, values), kustomized)
