"""A MIG re-layout's mig-parted config is published where MIG Manager reads it before
its node is labelled; without a place to publish it the step fails and labels nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from kubesage.core.errors import InputError
from kubesage.core.k8s.actuators import live_actuators
from kubesage.core.k8s.apiclient import ApiClient
from kubesage.core.k8s.embedded import EmbeddedCluster
from kubesage.core.k8s.mig_config_map import MigConfigMap, MigConfigPublisher
from kubesage.core.k8s.mig_manager import CONFIG_KEY, MIG_CONFIG_LABEL
from kubesage.core.k8s.node_labeler import LiveNodeLabeler
from kubesage.core.loop.actions import ActionKind, LabelNode
from kubesage.core.loop.reconciler import Outcome
from kubesage.core.policy import PolicyContext, make_policy
from tests.builders import node
from tests.core.k8s import v1_node
from tests.fakes.apiserver import CONFIG_MAPS, FakeApiServer

WHY = {"reconciler": "test", "explanation": "a test asked"}
WHERE = MigConfigMap("gpu-operator", "custom-mig-config")
STOCK = {  # what an operator seeds the ConfigMap with: stays untouched
    "version": "v1",
    "mig-configs": {"all-disabled": [{"devices": "all", "mig-enabled": False}]},
}


def relayout(node_name: str, digest: str, counts: dict[str, int]) -> LabelNode:
    """The step the GPU adapter's defragmenter plans for one re-laid-out node."""
    name = f"kubesage-{digest}"
    config = [{"devices": [0], "mig-enabled": True, "mig-devices": counts}]
    return LabelNode(
        node=node_name,
        labels={MIG_CONFIG_LABEL: name},
        mig_parted={"version": "v1", "mig-configs": {name: config}},
        **WHY,
    )


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        server.add_node(v1_node("n1"))
        server.add_node(v1_node("n2"))
        yield server


@pytest.fixture
def api(fake: FakeApiServer) -> ApiClient:
    return fake.client()


def seed(fake: FakeApiServer, document: Any = STOCK) -> None:
    fake.create(
        CONFIG_MAPS,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": WHERE.name, "namespace": WHERE.namespace},
            "data": {CONFIG_KEY: yaml.safe_dump(document), "other-key": "kept"},
        },
        namespace=WHERE.namespace,
    )


def published(fake: FakeApiServer) -> dict[str, Any]:
    config_map = fake.get(CONFIG_MAPS, WHERE.namespace, WHERE.name)
    assert config_map["data"]["other-key"] == "kept"
    document: dict[str, Any] = yaml.safe_load(config_map["data"][CONFIG_KEY])
    return document["mig-configs"]


def label_of(fake: FakeApiServer, name: str) -> str | None:
    labels: dict[str, str] = fake.node(name)["metadata"].get("labels") or {}
    return labels.get(MIG_CONFIG_LABEL)


def labeler(api: ApiClient) -> LiveNodeLabeler:
    return LiveNodeLabeler(api, mig_configs=MigConfigPublisher(api, WHERE, request_timeout_s=5))


def test_the_config_is_published_before_the_label_and_the_stock_ones_stay(
    fake: FakeApiServer, api: ApiClient
) -> None:
    seed(fake)
    step = relayout("n1", "aaaa1111", {"3g.40gb": 2})
    result = labeler(api).execute(step)
    assert result.outcome is Outcome.DONE, result.detail
    # A new config may reach MIG Manager's mounted copy after the label: the result says so.
    assert "published kubesage-aaaa1111 to gpu-operator/custom-mig-config just now" in (
        result.detail
    )
    assert "nvidia.com/mig.config.state=failed" in result.detail
    configs = published(fake)
    assert configs["all-disabled"] == STOCK["mig-configs"]["all-disabled"]
    assert step.mig_parted is not None
    assert configs["kubesage-aaaa1111"] == step.mig_parted["mig-configs"]["kubesage-aaaa1111"]
    assert label_of(fake, "n1") == "kubesage-aaaa1111"
    (write,) = fake.requests_to("PUT", "/configmaps/")
    (label,) = fake.requests_to("PATCH", "/nodes/n1$")
    assert fake.requests.index(write) < fake.requests.index(label)  # published first
    # The same layout again writes nothing, and has nothing to warn about.
    again = labeler(api).execute(step)
    assert again.outcome is Outcome.DONE and "published" not in again.detail
    assert len(fake.requests_to("PUT", "/configmaps/")) == 1


def test_own_configs_no_node_names_are_pruned_the_labelled_ones_kept(
    fake: FakeApiServer, api: ApiClient
) -> None:
    seed(fake)
    actuator = labeler(api)
    assert actuator.execute(relayout("n1", "aaaa1111", {"3g.40gb": 2})).outcome is Outcome.DONE
    assert actuator.execute(relayout("n2", "bbbb2222", {"7g.80gb": 1})).outcome is Outcome.DONE
    assert actuator.execute(relayout("n2", "cccc3333", {"1g.10gb": 7})).outcome is Outcome.DONE
    # n2 named bbbb2222 while cccc3333 was published, so it stayed; now nothing names it.
    assert "kubesage-bbbb2222" in published(fake)
    assert actuator.execute(relayout("n1", "dddd4444", {"2g.20gb": 3})).outcome is Outcome.DONE
    assert set(published(fake)) == {
        "all-disabled",
        "kubesage-aaaa1111",  # n1 still named it while dddd4444 was published
        "kubesage-cccc3333",
        "kubesage-dddd4444",
    }


def test_without_a_config_map_the_step_fails_and_labels_nothing(
    fake: FakeApiServer, api: ApiClient
) -> None:
    result = LiveNodeLabeler(api).execute(relayout("n1", "aaaa1111", {"3g.40gb": 2}))
    assert result.outcome is Outcome.FAILED
    assert "--mig-config-map" in result.detail and "kubesage-aaaa1111" in result.detail
    assert label_of(fake, "n1") is None
    # A label naming a config MIG Manager already has (no config carried) is set as is.
    stock = LabelNode(node="n1", labels={MIG_CONFIG_LABEL: "all-disabled"}, **WHY)
    assert LiveNodeLabeler(api).execute(stock).outcome is Outcome.DONE
    assert label_of(fake, "n1") == "all-disabled"


def test_a_missing_or_broken_config_map_fails_the_step_saying_what_to_do(
    fake: FakeApiServer, api: ApiClient
) -> None:
    step = relayout("n1", "aaaa1111", {"3g.40gb": 2})
    missing = labeler(api).execute(step)
    assert missing.outcome is Outcome.FAILED
    assert "gpu-operator/custom-mig-config does not exist" in missing.detail
    assert "spec.migManager.config.name" in missing.detail
    seed(fake, {"version": "v1", "mig-configs": {1: [], "kubesage-old": []}})  # a key 1:
    odd = labeler(api).execute(step)  # a key that is not a name is left alone, no crash
    assert odd.outcome is Outcome.DONE and 1 in published(fake)
    assert "kubesage-old" not in published(fake)  # no node names it: pruned
    fake.delete(CONFIG_MAPS, WHERE.namespace, WHERE.name)
    seed(fake, ["not", "a", "mapping"])
    broken = labeler(api).execute(step)
    assert broken.outcome is Outcome.FAILED and "is not a mapping" in broken.detail


def test_a_concurrent_change_is_not_overwritten(fake: FakeApiServer, api: ApiClient) -> None:
    seed(fake)
    fake.fail("PUT", r"/configmaps/custom-mig-config$", 409, message="the object has been modified")
    result = labeler(api).execute(relayout("n1", "aaaa1111", {"3g.40gb": 2}))
    assert result.outcome is Outcome.FAILED and "changed while it was updated" in result.detail
    assert "kubesage-aaaa1111" not in published(fake) and label_of(fake, "n1") is None


def test_live_actuators_publish_where_they_are_told(fake: FakeApiServer, api: ApiClient) -> None:
    seed(fake)
    view = EmbeddedCluster([node("n1", gpus=8)], [], "one node")
    actuators = live_actuators(
        api, view, make_policy("bestfit", PolicyContext()), mig_config_map=WHERE
    )
    (label_actuator,) = [a for a in actuators if ActionKind.LABEL_NODE in a.kinds]
    result = label_actuator.execute(relayout("n1", "aaaa1111", {"3g.40gb": 2}))
    assert result.outcome is Outcome.DONE and "kubesage-aaaa1111" in published(fake)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("custom-mig-config", "expected NAMESPACE/NAME of a ConfigMap"),
        ("Gpu_Operator/custom", "namespace 'Gpu_Operator' is not a DNS-1123 label"),
        ("gpu-operator/Custom Config", "name 'Custom Config' is not a DNS-1123 subdomain"),
        ("/custom", "expected NAMESPACE/NAME"),
    ],
)
def test_a_bad_config_map_name_is_refused_naming_the_option(text: str, message: str) -> None:
    with pytest.raises(InputError, match=rf"--mig-config-map '{text}': {message}"):
        MigConfigMap.parse(text)
