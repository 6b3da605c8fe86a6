"""Where the webhook's SchedulingPolicies come from: a folder of files (reloaded, the last
good set kept on a bad edit) and the API (the last good list served while it fails)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kubesage.core.k8s.policy_source import (
    ApiPolicySource,
    FilePolicySource,
    PolicySourceError,
    default_policy_dir,
)
from tests.core.k8s.webhook_support import (
    call,
    pod_object,
    review,
    webhook_for,
)


def _write_policy(path: Path, name: str, scheduler: str) -> None:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kubesage.io/v1alpha1",
                "kind": "SchedulingPolicy",
                "metadata": {"name": name},
                "spec": {"podSelector": {}, "inject": {"schedulerName": scheduler}},
            }
        )
    )


def test_file_source_reloads_and_keeps_the_last_good_policies_on_a_bad_edit(
    tmp_path: Path,
) -> None:
    _write_policy(tmp_path / "a.yaml", "a", "one")
    source = FilePolicySource(tmp_path)
    assert [p.spec.inject.scheduler_name for p in source.policies()] == ["one"]
    _write_policy(tmp_path / "a.yaml", "a", "two-longer-name")
    assert [p.spec.inject.scheduler_name for p in source.policies()] == ["two-longer-name"]
    (tmp_path / "a.yaml").write_text("kind: SchedulingPolicy\nspec: {}\n")
    assert [p.spec.inject.scheduler_name for p in source.policies()] == ["two-longer-name"]
    assert source.stale and source.failures == 1
    assert "apiVersion" in (source.last_error or "")
    (tmp_path / "a.yaml").unlink()
    assert source.policies() == [] and not source.stale


def test_file_source_refuses_to_start_on_a_bad_policy(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump({"apiVersion": "kubesage.io/v1alpha1"}))
    with pytest.raises(Exception, match=r"bad\.yaml.*kind"):
        FilePolicySource(tmp_path)


@pytest.fixture
def fake_api() -> Any:
    from tests.fakes.apiserver import FakeApiServer

    with FakeApiServer() as fake:
        yield fake


def _api_client(fake: Any) -> Any:
    from kubernetes import config

    return config.new_client_from_config(config_file=str(fake.kubeconfig))


def test_api_source_lists_the_shipped_policies_and_skips_an_invalid_one(
    fake_api: Any,
) -> None:
    """The decoding of the listed objects; the background refresh, its failures and
    its staleness are in test_policy_source_background.py."""
    from tests.fakes.apiserver import SCHEDULING_POLICIES

    for path in sorted(default_policy_dir().glob("*.yaml")):
        fake_api.add_custom(SCHEDULING_POLICIES, yaml.safe_load(path.read_text()))
    invalid = yaml.safe_load((default_policy_dir() / "spark.yaml").read_text())
    invalid["metadata"]["name"] = "broken"
    invalid["spec"]["inject"]["spark"]["locality"] = "continent"
    fake_api.add_custom(SCHEDULING_POLICIES, invalid)
    with ApiPolicySource(_api_client(fake_api), refresh_s=600.0) as source:
        names = sorted(p.name for p in source.policies())
        assert names == ["flink-streaming", "gpu-training", "spark-rack-locality"]
        assert source.invalid == 1 and not source.stale
        calls = len(fake_api.requests_to("GET", "schedulingpolicies"))
        source.policies()  # a read: served from memory
        assert len(fake_api.requests_to("GET", "schedulingpolicies")) == calls


def test_api_source_without_any_good_list_raises_and_the_webhook_still_allows(
    fake_api: Any,
) -> None:
    fake_api.fail("GET", "schedulingpolicies", 500, times=5)
    source = ApiPolicySource(_api_client(fake_api))
    with pytest.raises(PolicySourceError, match=r"schedulingpolicies\.kubesage\.io"):
        source.policies()
    webhook = webhook_for(ApiPolicySource(_api_client(fake_api)))
    response, patch = call(webhook, review(pod_object()))
    assert patch == [] and response["warnings"]
    webhook.close()
