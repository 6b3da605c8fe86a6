"""load_api_client: explicit kubeconfig, KUBECONFIG, ~/.kube/config, in-cluster, none."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from kubesage.core.errors import ConfigError
from kubesage.core.k8s.apiclient import load_api_client
from tests.fakes.apiserver import FakeApiServer


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        # Minimal: the typed client below deserialises it, and requires every nodeInfo
        # field of a real node once nodeInfo is present.
        server.add_node({"metadata": {"name": "only-node"}, "status": {"allocatable": {}}})
        yield server


@pytest.fixture
def no_cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An environment with no kubeconfig anywhere and not inside a pod."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def node_names(api: client.ApiClient | None) -> list[str]:
    assert api is not None
    return [node.metadata.name for node in client.CoreV1Api(api).list_node().items]


def test_explicit_kubeconfig_reaches_the_server(fake: FakeApiServer, no_cluster: Path) -> None:
    assert node_names(load_api_client(str(fake.kubeconfig))) == ["only-node"]


def test_kubeconfig_env_and_home_are_found(
    fake: FakeApiServer, no_cluster: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = no_cluster / "missing.yaml"
    monkeypatch.setenv("KUBECONFIG", f"{missing}:{fake.kubeconfig}")
    assert node_names(load_api_client()) == ["only-node"]
    monkeypatch.delenv("KUBECONFIG")
    (no_cluster / ".kube").mkdir()
    (no_cluster / ".kube" / "config").write_text(fake.kubeconfig.read_text())
    assert node_names(load_api_client()) == ["only-node"]


def test_nothing_configured_means_no_client(no_cluster: Path) -> None:
    assert load_api_client() is None


def test_context_selects_among_contexts(fake: FakeApiServer, no_cluster: Path) -> None:
    assert node_names(load_api_client(str(fake.kubeconfig), context="fake")) == ["only-node"]
    with pytest.raises(ConfigError, match="cannot load kubeconfig"):
        load_api_client(str(fake.kubeconfig), context="no-such-context")


@pytest.mark.parametrize(
    ("content", "match"),
    [(None, "does not exist"), ("clusters: [not, a, config", "cannot load kubeconfig")],
)
def test_unreadable_kubeconfig_is_a_config_error(
    no_cluster: Path, content: str | None, match: str
) -> None:
    path = no_cluster / "kubeconfig"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError, match=match) as caught:
        load_api_client(str(path))
    assert str(path) in str(caught.value)


def test_in_cluster_without_a_service_account_is_a_config_error(
    no_cluster: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    with pytest.raises(ConfigError, match="in-cluster"):
        load_api_client()


def test_the_fake_refuses_field_selectors_the_api_server_refuses(
    fake: FakeApiServer, no_cluster: Path
) -> None:
    core = client.CoreV1Api(load_api_client(str(fake.kubeconfig)))
    selected = core.list_pod_for_all_namespaces(field_selector="spec.schedulerName=kubesage")
    assert selected.items == []
    with pytest.raises(client.ApiException) as caught:
        core.list_pod_for_all_namespaces(field_selector="spec.priority=5")
    assert caught.value.status == 400 and "not a known field selector" in caught.value.body
