"""deploy/helm/kubesage's TLS with the self-signed bootstrap: a generated certificate
serves the Service, a given bundle is used as is, half a bundle is refused."""

from __future__ import annotations

import base64
from types import ModuleType
from typing import Any

import pytest

from kubesage.core.k8s.tls import TlsBundle, bootstrap, check_bundle
from tests.deploy.helm_support import pem_values, render
from tests.deploy.manifests_support import find


def tls_bundle(secret: dict[str, Any]) -> TlsBundle:
    data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    return TlsBundle(cert_pem=data["tls.crt"], key_pem=data["tls.key"], ca_pem=data["ca.crt"])


def test_a_generated_certificate_serves_the_service(helm: ModuleType) -> None:
    docs = render(helm)
    secret = find(docs, "Secret", "kubesage-webhook-tls")
    assert secret["type"] == "kubernetes.io/tls"
    check_bundle(tls_bundle(secret), dns_name="kubesage.kubesage.svc")
    (webhook,) = find(docs, "MutatingWebhookConfiguration")["webhooks"]
    assert webhook["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]


def test_a_given_bundle_is_used_as_is(helm: ModuleType) -> None:
    bundle = bootstrap("kubesage", "kubesage")
    docs = render(helm, {"tls": {"selfSigned": pem_values(bundle)}})
    assert tls_bundle(find(docs, "Secret")) == bundle
    (webhook,) = find(docs, "MutatingWebhookConfiguration")["webhooks"]
    assert base64.b64decode(webhook["clientConfig"]["caBundle"]) == bundle.ca_pem


def test_half_a_bundle_is_refused(helm: ModuleType) -> None:
    bundle = pem_values(bootstrap("kubesage", "kubesage"))
    with pytest.raises(helm.HelmError, match=r"tls\.selfSigned: give cert, key and ca together"):
        render(helm, {"tls": {"selfSigned": {"cert": bundle["cert"]}}})
