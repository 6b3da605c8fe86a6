"""SchedulingPolicy: strict models, Kubernetes label-selector semantics, loading errors
with field paths, the examples in configs/, and the CRD schema derived from the models."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from kubesage.core.errors import ConfigError
from kubesage.core.k8s.policy_crd import crd_manifest, openapi_schema, render_crd_yaml
from kubesage.core.k8s.policy_source import default_policy_dir, load_policy_dir
from kubesage.core.k8s.scheduling_policy import (
    SchedulingPolicy,
    by_priority,
    load_policy_file,
    name_only_namespace_labels,
    parse_policy,
)
from kubesage.core.k8s.v1_models import LabelSelector

ROOT = Path(__file__).resolve().parents[3]
CRD_FILE = ROOT / "deploy" / "base" / "crd-schedulingpolicy.yaml"


def policy_doc(**spec: Any) -> dict[str, Any]:
    """A minimal valid policy document; keyword arguments replace parts of ``spec``."""
    base: dict[str, Any] = {
        "apiVersion": "kubesage.io/v1alpha1",
        "kind": "SchedulingPolicy",
        "metadata": {"name": "p"},
        "spec": {"podSelector": {}, "inject": {"schedulerName": "kubesage"}},
    }
    base["spec"].update(spec)
    return base


# --- selector semantics: the table of metav1.LabelSelector ------------------------------

SELECTOR_CASES = [
    # (selector, labels, matches)
    ({}, {}, True),
    ({}, {"a": "1"}, True),
    ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
    ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
    ({"matchLabels": {"a": "1"}}, {}, False),
    ({"matchLabels": {"a": ""}}, {"a": ""}, True),
    ({"matchLabels": {"a": ""}}, {}, False),
    (
        {"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]},
        {"a": "2"},
        True,
    ),
    ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]}]}, {"a": "3"}, False),
    ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]}]}, {}, False),
    ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {"a": "2"}, True),
    ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {"a": "1"}, False),
    # NotIn matches a pod without the key, as in Kubernetes.
    ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
    ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True),
    ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"b": "1"}, False),
    ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"b": "1"}, True),
    ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": "1"}, False),
    # Everything is ANDed.
    (
        {
            "matchLabels": {"team": "ml"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["gpu"]},
                {"key": "debug", "operator": "DoesNotExist"},
            ],
        },
        {"team": "ml", "tier": "gpu"},
        True,
    ),
    (
        {
            "matchLabels": {"team": "ml"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["gpu"]},
                {"key": "debug", "operator": "DoesNotExist"},
            ],
        },
        {"team": "ml", "tier": "gpu", "debug": "true"},
        False,
    ),
    (
        {"matchExpressions": [{"key": "kubesage.io/tier", "operator": "In", "values": ["a"]}]},
        {"kubesage.io/tier": "a"},
        True,
    ),
]


@pytest.mark.parametrize(("selector", "labels", "matches"), SELECTOR_CASES)
def test_label_selector_follows_kubernetes(
    selector: dict[str, Any], labels: dict[str, str], matches: bool
) -> None:
    assert LabelSelector.model_validate(selector).matches(labels) is matches


def test_namespace_selector_is_anded_with_the_pod_selector() -> None:
    policy = parse_policy(
        policy_doc(
            podSelector={"matchLabels": {"app": "x"}},
            namespaceSelector={"matchLabels": {"kubernetes.io/metadata.name": "ml"}},
        )
    )
    ml = {"kubernetes.io/metadata.name": "ml"}
    assert policy.selects({"app": "x"}, ml)
    assert not policy.selects({"app": "x"}, {"kubernetes.io/metadata.name": "web"})
    assert not policy.selects({"app": "y"}, ml)
    without = parse_policy(policy_doc(podSelector={"matchLabels": {"app": "x"}}))
    assert without.selects({"app": "x"}, {})


def test_priority_orders_highest_first_then_by_name() -> None:
    docs = []
    for name, priority in (("b", 1), ("a", 1), ("c", 5), ("d", -3)):
        doc = policy_doc(priority=priority)
        doc["metadata"]["name"] = name
        docs.append(parse_policy(doc))
    assert [p.name for p in by_priority(docs)] == ["c", "a", "b", "d"]


# --- loading errors name the file and field path ----------------------------------------

BAD_POLICIES = [
    # (change to a valid document, field path, words in the message)
    (
        lambda d: d["spec"]["inject"].update(
            affinity={
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "zone", "operator": "Near"}]}
                        ]
                    }
                }
            }
        ),
        "spec.inject.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        ".nodeSelectorTerms.0.matchExpressions.0.operator",
        "'In', 'NotIn'",
    ),
    (
        lambda d: d["spec"]["podSelector"].update(
            matchExpressions=[{"key": "a", "operator": "In", "values": []}]
        ),
        "spec.podSelector.matchExpressions.0",
        "needs at least one value",
    ),
    (
        lambda d: d["spec"]["podSelector"].update(
            matchExpressions=[{"key": "a", "operator": "Exists", "values": ["x"]}]
        ),
        "spec.podSelector.matchExpressions.0",
        "takes no values",
    ),
    (
        lambda d: d["spec"]["inject"].update(tolerations=[{"key": "gpu", "effect": "Sometimes"}]),
        "spec.inject.tolerations.0.effect",
        "NoSchedule",
    ),
    (
        lambda d: d["spec"]["inject"].update(
            tolerations=[{"key": "gpu", "operator": "Exists", "tolerationSeconds": 5}]
        ),
        "spec.inject.tolerations.0",
        "NoExecute",
    ),
    (
        lambda d: d["spec"]["inject"].update(migResources=[{"to": "nvidia.com/gpu"}]),
        "spec.inject.migResources.0.to",
        "pattern",
    ),
    (
        lambda d: d["spec"]["inject"].update(flink={"initialParallelism": 8, "maxParallelism": 4}),
        "spec.inject.flink",
        "above maxParallelism",
    ),
    (
        lambda d: d["spec"]["inject"].update(spark={"locality": "continent"}),
        "spec.inject.spark.locality",
        "'node'",
    ),
    (
        lambda d: d["spec"].update(priority="high"),
        "spec.priority",
        "integer",
    ),
    (lambda d: d["spec"].update(inject={}), "spec.inject", "inject sets nothing"),
    (lambda d: d["spec"]["inject"].update(nodeName="n1"), "spec.inject.nodeName", "unknown key"),
    (lambda d: d["spec"].pop("podSelector"), "spec.podSelector", "required"),
    (lambda d: d.update(apiVersion="kubesage.io/v1"), "apiVersion", "kubesage.io/v1alpha1"),
    (lambda d: d["metadata"].update(name="Not_A_Name"), "metadata.name", "pattern"),
    (
        lambda d: d["spec"]["inject"].update(labels={"bad key!": "x"}),
        "spec.inject.labels.bad key!.[key]",
        "pattern",
    ),
]


@pytest.mark.parametrize(("change", "field", "words"), BAD_POLICIES)
def test_a_bad_policy_is_rejected_with_file_and_field_path(
    tmp_path: Path, change: Any, field: str, words: str
) -> None:
    document = policy_doc()
    change(document)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(document))
    with pytest.raises(ConfigError) as caught:
        load_policy_file(path)
    assert caught.value.field == field
    assert caught.value.path == path
    assert str(path) in str(caught.value)
    assert f"field '{field}'" in str(caught.value)
    assert words in str(caught.value)


def test_multi_document_files_name_the_document(tmp_path: Path) -> None:
    good, bad = policy_doc(), policy_doc(priority=5000)
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump_all([good, bad]))
    with pytest.raises(ConfigError, match=r"document 2.*spec\.priority"):
        load_policy_file(path)


def test_not_yaml_and_duplicate_names_are_errors(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("spec: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_policy_dir(tmp_path)
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(policy_doc()))
    (tmp_path / "b.yml").write_text(yaml.safe_dump(policy_doc()))
    with pytest.raises(ConfigError, match="also defined in") as caught:
        load_policy_dir(tmp_path)
    assert caught.value.field == "metadata.name"


# --- the v1 shapes round-trip exactly ----------------------------------------------------


def test_injected_affinity_and_tolerations_dump_in_the_v1_shapes() -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [{"key": "gpu", "operator": "Gt", "values": ["3"]}],
                        "matchFields": [
                            {"key": "metadata.name", "operator": "NotIn", "values": ["n9"]}
                        ],
                    }
                ]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 10,
                    "preference": {"matchExpressions": [{"key": "z", "operator": "Exists"}]},
                }
            ],
        },
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {"job": "a"}},
                    "topologyKey": "kubernetes.io/hostname",
                    "matchLabelKeys": ["pod-template-hash"],
                }
            ]
        },
    }
    tolerations = [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {
            "key": "spot",
            "operator": "Equal",
            "value": "true",
            "effect": "NoExecute",
            "tolerationSeconds": 30,
        },
        {"operator": "Exists"},
    ]
    policy = parse_policy(policy_doc(inject={"affinity": affinity, "tolerations": tolerations}))
    assert policy.spec.inject.affinity is not None
    assert policy.spec.inject.affinity.to_v1() == affinity
    assert [t.to_v1() for t in policy.spec.inject.tolerations] == tolerations


REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def _required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": list(terms)}}}


def _preferred_pod_term(**term: Any) -> dict[str, Any]:
    term = {"topologyKey": "kubernetes.io/hostname", **term}
    return {"podAffinity": {PREFERRED: [{"weight": 10, "podAffinityTerm": term}]}}


@pytest.mark.parametrize(
    ("affinity", "field"),
    [
        (_required({"matchFields": [{"key": "metadata.labels.pool", "operator": "In",
                                     "values": ["a"]}]}), "matchFields.0.key"),
        (_required({"matchFields": [{"key": "metadata.name", "operator": "Exists"}]}),
         "matchFields.0.operator"),
        (_required({"matchFields": [{"key": "metadata.name", "operator": "In",
                                     "values": ["n1", "n2"]}]}), "matchFields.0.values"),
        (_required({"matchExpressions": [{"key": "gpu product", "operator": "Exists"}]}),
         "matchExpressions.0.key"),
        (_required({"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In",
                                          "values": ["NVIDIA H100 80GB"]}]}), "not a label value"),
        (_preferred_pod_term(namespaces=["ML_Team"], labelSelector={}), "namespaces.0"),
        (_preferred_pod_term(matchLabelKeys=["app"]), "need a labelSelector"),
        (_preferred_pod_term(labelSelector={}, matchLabelKeys=["app"], mismatchLabelKeys=["app"]),
         "in both matchLabelKeys and mismatchLabelKeys"),
    ],
)  # fmt: skip
def test_affinity_the_api_server_would_refuse_is_refused_in_the_policy(
    affinity: dict[str, Any], field: str
) -> None:
    """Injected into pods, each of these would make the API server refuse every pod the
    policy selects (the webhook's answer is applied before validation): the policy is
    refused instead, naming the field."""
    with pytest.raises(ConfigError, match=re.escape(field)):
        parse_policy(policy_doc(inject={"affinity": affinity}))


@pytest.mark.parametrize("to", ["nvidia.com/mig-9g.999gb", "nvidia.com/mig-1c.3g.20gb"])
def test_a_mig_rename_to_a_profile_no_gpu_has_is_refused(to: str) -> None:
    """The pattern allows these; renamed to them, every selected pod could never run."""
    with pytest.raises(ConfigError, match="is not a MIG profile name"):
        parse_policy(policy_doc(inject={"migResources": [{"to": to}]}))


@pytest.mark.parametrize(
    ("selector", "selects_unknown"),
    [
        ({"matchExpressions": [{"key": "restricted", "operator": "DoesNotExist"}]}, False),
        ({"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["web"]}]}, False),
        ({"matchLabels": {"kubernetes.io/metadata.name": "research"}}, True),
    ],
)
def test_a_namespace_known_by_name_only_matches_only_selectors_on_its_name(
    selector: dict[str, Any], selects_unknown: bool
) -> None:
    """A namespace the cache has not read may carry any label: a selector that tests
    another label (NotIn and DoesNotExist match an absent one) does not guess."""
    policy = parse_policy(policy_doc(namespaceSelector=selector))
    assert policy.selects({}, name_only_namespace_labels("research")) is selects_unknown
    # The same namespace, its labels read and without the tested label: it matches.
    assert policy.selects({}, {"kubernetes.io/metadata.name": "research"})


# --- examples and the CRD ----------------------------------------------------------------


def test_example_policies_load_and_cover_gpu_flink_and_spark() -> None:
    policies = {p.name: p for p in load_policy_dir(default_policy_dir())}
    gpu = policies["gpu-training"].spec.inject
    assert gpu.scheduler_name == "kubesage"
    assert gpu.mig_resources[0].to.startswith("nvidia.com/mig-")
    assert policies["flink-streaming"].spec.inject.flink is not None
    assert policies["spark-rack-locality"].spec.inject.spark is not None
    for path in sorted(default_policy_dir().glob("*.yaml")):
        assert yaml.safe_load(path.read_text())["apiVersion"] == "kubesage.io/v1alpha1"


def test_crd_in_deploy_base_is_the_one_generated_from_the_models() -> None:
    assert CRD_FILE.read_text() == render_crd_yaml(), (
        "deploy/base/crd-schedulingpolicy.yaml is stale: run "
        "python -m kubesage.core.k8s.policy_crd > deploy/base/crd-schedulingpolicy.yaml"
    )
    crd = yaml.safe_load(CRD_FILE.read_text())
    assert crd == crd_manifest()
    assert crd["spec"]["scope"] == "Cluster"


def _walk(schema: Any) -> list[dict[str, Any]]:
    found = []
    if isinstance(schema, dict):
        found.append(schema)
        for value in schema.values():
            found += _walk(value)
    elif isinstance(schema, list):
        for value in schema:
            found += _walk(value)
    return found


def test_crd_schema_is_structural() -> None:
    """The rules the API server enforces for apiextensions.k8s.io/v1 schemas."""
    schema = openapi_schema()
    forbidden = {
        "$ref",
        "anyOf",
        "oneOf",
        "allOf",
        "$defs",
        "definitions",
        "const",
        "patternProperties",
    }
    for node in _walk(schema):
        if "properties" in node or "items" in node or "enum" in node or "pattern" in node:
            assert "type" in node, node
        assert not forbidden & set(node), node
        assert node.get("additionalProperties", True) is not False, node
        assert not ("properties" in node and "additionalProperties" in node), node


def _schema_accepts(document: dict[str, Any]) -> bool:
    try:
        jsonschema.Draft202012Validator(openapi_schema()).validate(document)
    except jsonschema.ValidationError:
        return False
    return True


def _models_accept(document: dict[str, Any]) -> bool:
    try:
        parse_policy(document)
    except ConfigError:
        return False
    return True


def test_examples_validate_against_the_crd_schema() -> None:
    validator = jsonschema.Draft202012Validator(
        crd_manifest()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    )
    for path in sorted(default_policy_dir().glob("*.yaml")):
        validator.validate(yaml.safe_load(path.read_text()))


# What the CRD schema cannot say, kubesage checks when it loads a policy: cross-field
# rules (values vs operator, parallelism bounds, tolerationSeconds with NoExecute, an
# empty inject), map keys (structural schemas cannot constrain them) and unknown fields
# (the API server prunes them rather than failing). apiVersion and metadata.name are
# checked by the API server itself, not by the version's schema.
SCHEMA_CANNOT_TELL = {
    "spec.podSelector.matchExpressions.0",
    "spec.inject.tolerations.0",
    "spec.inject.flink",
    "spec.inject",
    "spec.inject.nodeName",
    "spec.inject.labels.bad key!.[key]",
    "apiVersion",
    "metadata.name",
}


@pytest.mark.parametrize(("change", "field"), [case[:2] for case in BAD_POLICIES])
def test_schema_and_models_agree(change: Any, field: str) -> None:
    document = policy_doc()
    change(document)
    assert not _models_accept(document)
    assert _schema_accepts(document) is (field in SCHEMA_CANNOT_TELL)


def test_schema_and_models_agree_on_valid_documents() -> None:
    for path in sorted(default_policy_dir().glob("*.yaml")):
        document = yaml.safe_load(path.read_text())
        assert _models_accept(document) and _schema_accepts(document)
        trimmed = copy.deepcopy(document)
        trimmed["spec"].pop("priority", None)
        assert _models_accept(trimmed) and _schema_accepts(trimmed)


def test_a_policy_round_trips_through_its_own_json() -> None:
    for policy in load_policy_dir(default_policy_dir()):
        again = SchedulingPolicy.model_validate(policy.to_v1())
        assert again == policy
