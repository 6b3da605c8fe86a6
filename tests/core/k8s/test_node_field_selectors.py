"""A node affinity's ``matchFields`` takes one value per requirement: the API server's
rule, which the OpenAPI schema does not carry. kubesage's manifest validation and the
fake API server both refuse a pod that breaks it, and the helper that pins pods to
nodes by name writes one term per node."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kubesage.core.errors import InputError
from kubesage.core.k8s.apiclient import ApiException, CoreV1Api, load_api_client
from kubesage.core.k8s.node_eligibility import node_name_terms, on_nodes
from kubesage.core.k8s.validation import node_field_selector_problems, validate_manifests
from tests.fakes.apiserver import FakeApiServer

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def pod(affinity: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "trainer-0", "namespace": "default"},
        "spec": {"affinity": affinity, "containers": [{"name": "main", "image": "busybox"}]},
    }


def two_names_in_one_term() -> dict[str, Any]:
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a", "b"]}]}
    return {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [term]}}}


def test_one_term_per_node_passes_and_matches_each_node() -> None:
    affinity = on_nodes(["a", "b"])
    validate_manifests([pod(affinity)])
    terms = affinity["nodeAffinity"][REQUIRED]["nodeSelectorTerms"]
    assert terms == node_name_terms(["a", "b"])
    assert [term["matchFields"][0]["values"] for term in terms] == [["a"], ["b"]]


def test_validation_names_every_breach_with_its_path() -> None:
    with pytest.raises(InputError, match=r"nodeSelectorTerms\[0\]\.matchFields\[0\]\.values: "):
        validate_manifests([pod(two_names_in_one_term())])
    preferred = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 5,
                    "preference": {
                        "matchFields": [{"key": "metadata.labels", "operator": "Exists"}]
                    },
                }
            ]
        }
    }
    problems = node_field_selector_problems(pod(preferred))
    assert problems == [
        "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]"
        ".preference.matchFields[0].operator: 'Exists' is not a valid selector operator",
        "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]"
        ".preference.matchFields[0].key: 'metadata.labels' is not a valid field selector key",
    ]


def test_the_fake_api_server_refuses_what_the_real_one_does() -> None:
    with FakeApiServer() as fake:
        api = load_api_client(str(fake.kubeconfig))
        assert api is not None
        core = CoreV1Api(api)
        with pytest.raises(ApiException) as caught:
            core.create_namespaced_pod("default", pod(two_names_in_one_term()))
        assert caught.value.status == 422
        message = json.loads(caught.value.body)["message"]
        assert message.startswith('Pod "trainer-0" is invalid: spec.affinity.nodeAffinity.')
        assert "must be only one value when `operator` is 'In' or 'NotIn'" in message
        created = core.create_namespaced_pod("default", pod(on_nodes(["a", "b"])))
        assert created.metadata.name == "trainer-0"
