"""Rendering deploy/helm/kubesage offline for the chart's tests: the Helm library that
helm-python-sdk (module ``helm_python``) binds, the chart's objects for given values,
and ``kubesage serve``'s own option parser over the Deployment's arguments."""

from __future__ import annotations

import functools
import importlib
from types import ModuleType
from typing import Any

import kubernetes_validate
import pytest
import typer
import yaml

from kubesage.core.k8s.tls import TlsBundle
from tests.deploy.manifests_support import DEPLOY, ci

CHART = DEPLOY / "helm" / "kubesage"
RELEASE = "kubesage"
NAMESPACE = "kubesage"
CURRENT_KUBERNETES = kubernetes_validate.latest_version()
"""The newest schema kubernetes-validate ships: "a current Kubernetes"."""


def load_helm() -> ModuleType:
    """helm_python, or a failure on CI / a skip elsewhere when its library cannot load."""
    try:
        return importlib.import_module("helm_python")
    except Exception as exc:  # ImportError, or HelmLibraryError: no or a foreign native library
        message = f"helm_python (package helm-python-sdk) cannot load: {exc}"
        if ci():
            pytest.fail(message)
        pytest.skip(message)


def render(
    helm: ModuleType,
    values: dict[str, Any] | None = None,
    *,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
) -> list[dict[str, Any]]:
    """The objects the chart renders for ``values``, as `helm install` would create them."""
    with helm.Chart.load(CHART) as chart:
        manifests = chart.render(values or {}, name=release, namespace=namespace)
    docs: list[dict[str, Any]] = []
    for path, text in sorted(manifests.items()):
        if path.endswith("NOTES.txt"):
            continue
        docs.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return docs


def merged(helm: ModuleType, values: dict[str, Any]) -> dict[str, Any]:
    with helm.Chart.load(CHART) as chart:
        result: dict[str, Any] = chart.merge_values(values)
        return result


def electing(values: dict[str, Any]) -> bool:
    """Whether the process runs --scheduler-name (its own scheduler and the Lease)."""
    return bool(values["mode"] != "extender" or values["leaderElection"]["enabled"])


@functools.cache
def serve_command() -> Any:
    """``kubesage serve`` as a click command (only it: the whole CLI imports much more)."""
    from kubesage.core.cli.serve import serve

    app = typer.Typer()
    app.command(name="serve")(serve)
    return typer.main.get_command(app)


def serve_options(args: list[str]) -> dict[str, Any]:
    """What ``kubesage serve`` parses from ``args`` (its own parser: unknown flags, bad
    types and out-of-range values fail), defaults included."""
    assert args[0] == "serve"
    context = serve_command().make_context("serve", list(args[1:]))
    return dict(context.params)


def pem_values(bundle: TlsBundle) -> dict[str, str]:
    return {
        "cert": bundle.cert_pem.decode(),
        "key": bundle.key_pem.decode(),
        "ca": bundle.ca_pem.decode(),
    }
