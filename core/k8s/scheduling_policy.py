"""The ``SchedulingPolicy`` custom resource (``kubesage.io/v1alpha1``): models, matching, loading.

A SchedulingPolicy tells the admission webhook which pods to change and how: a pod
selector (and an optional namespace selector) picks pods; ``spec.inject`` says what
to add — ``schedulerName``, affinity in the exact v1 shapes, tolerations, labels,
annotations, MIG resource renames and Flink/Spark hints. ``spec.priority`` orders
policies: the webhook applies matching policies from the highest priority down and
each one only fills in what is still unset, so the higher priority wins wherever two
overlap while additive fields (tolerations, affinity terms) accumulate.

The resource is **cluster-scoped**: a policy steers pods of many namespaces (hence
``namespaceSelector``, as in a MutatingWebhookConfiguration), it grants tolerations
for tainted GPU pools and redirects pods to another scheduler — decisions for the
cluster operator, not for a namespace tenant — and the webhook lists every policy in
one call.

Label selectors follow ``metav1.LabelSelector`` exactly: ``matchLabels`` and every
``matchExpressions`` entry are ANDed; ``In`` needs the key with one of the values,
``NotIn`` matches when the key is absent or its value is none of the values,
``Exists``/``DoesNotExist`` test the key only; an empty selector matches everything.

The models are the single source of truth: :func:`crd_manifest` derives the CRD's
structural OpenAPI v3 schema from them, and ``deploy/base`` holds its rendered form
(a test fails when the two drift; regenerate with
``python -m kubesage.core.k8s.scheduling_policy > deploy/base/crd-schedulingpolicy.yaml``).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic.alias_generators import to_camel

from kubesage.core.errors import ConfigError
from kubesage.core.topology.discovery import DEFAULT_RACK_LABEL, ZONE_LABEL

GROUP = "kubesage.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "SchedulingPolicy"
PLURAL = "schedulingpolicies"
SINGULAR = "schedulingpolicy"

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
"""Label the API server sets on every namespace to its name (selectable without a lookup)."""
FLINK_INITIAL_PARALLELISM_ANNOTATION = "kubesage.io/flink-initial-parallelism"
FLINK_MAX_PARALLELISM_ANNOTATION = "kubesage.io/flink-max-parallelism"
FLINK_CHECKPOINT_GROUP_ANNOTATION = "kubesage.io/flink-checkpoint-group"
"""Jobs sharing a checkpoint group get staggered checkpoint phases."""
SPARK_LOCALITY_ANNOTATION = "kubesage.io/spark-locality"
SPARK_APP_LABEL = "spark-app-selector"
"""Label Spark on Kubernetes puts on a driver and its executors (the application id)."""
HOSTNAME_LABEL = "kubernetes.io/hostname"

_DNS_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_NAME_PART = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
QUALIFIED_NAME_PATTERN = rf"^({_DNS_SUBDOMAIN}/)?{_NAME_PART}$"
LABEL_VALUE_PATTERN = rf"^({_NAME_PART})?$"
DNS_SUBDOMAIN_PATTERN = rf"^{_DNS_SUBDOMAIN}$"
RESOURCE_NAME_PATTERN = QUALIFIED_NAME_PATTERN
MIG_RESOURCE_PATTERN = r"^nvidia\.com/mig-([0-9]+c\.)?[0-9]+g\.[0-9]+gb(\+me)?$"
"""MIG resources of the NVIDIA device plugin's mixed strategy, e.g. ``nvidia.com/mig-3g.40gb``."""


def _qualified_name(value: str) -> str:
    prefix, _, name = value.rpartition("/")
    if len(name) > 63:
        raise ValueError(f"name part of '{value}' is longer than 63 characters")
    if len(prefix) > 253:
        raise ValueError(f"prefix of '{value}' is longer than 253 characters")
    return value


QualifiedName = Annotated[
    str, Field(pattern=QUALIFIED_NAME_PATTERN, max_length=317), AfterValidator(_qualified_name)
]
"""A label or annotation key: optional DNS-subdomain prefix and '/', then a name ≤ 63."""
LabelValue = Annotated[str, Field(pattern=LABEL_VALUE_PATTERN, max_length=63)]
DnsSubdomain = Annotated[str, Field(pattern=DNS_SUBDOMAIN_PATTERN, min_length=1, max_length=253)]
Weight = Annotated[int, Field(ge=1, le=100)]


class V1Model(BaseModel):
    """Strict, frozen model with camelCase JSON names (the Kubernetes spelling)."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        strict=True,
        alias_generator=to_camel,
        populate_by_name=True,
        use_attribute_docstrings=True,
    )

    def to_v1(self) -> dict[str, Any]:
        """The object as Kubernetes JSON: camelCase, unset and empty fields left out."""
        return self.model_dump(by_alias=True, exclude_defaults=True, mode="json")


def _check_values(operator: str, values: list[str]) -> None:
    if operator in ("In", "NotIn") and not values:
        raise ValueError(f"operator {operator} needs at least one value")
    if operator in ("Exists", "DoesNotExist") and values:
        raise ValueError(f"operator {operator} takes no values")


# --- label selectors ------------------------------------------------------------------


class LabelSelectorRequirement(V1Model):
    """One ``matchExpressions`` entry of a ``metav1.LabelSelector``."""

    key: QualifiedName
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[LabelValue] = []

    @model_validator(mode="after")
    def _values_fit_operator(self) -> LabelSelectorRequirement:
        _check_values(self.operator, self.values)
        return self

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Kubernetes semantics: NotIn and DoesNotExist also match an absent key."""
        present = self.key in labels
        if self.operator == "In":
            return present and labels[self.key] in self.values
        if self.operator == "NotIn":
            return not present or labels[self.key] not in self.values
        if self.operator == "Exists":
            return present
        return not present


class LabelSelector(V1Model):
    """``metav1.LabelSelector``: all terms ANDed; an empty selector selects everything."""

    match_labels: dict[QualifiedName, LabelValue] = {}
    match_expressions: list[LabelSelectorRequirement] = []

    def matches(self, labels: Mapping[str, str]) -> bool:
        """True when ``labels`` satisfy every ``matchLabels`` pair and every expression."""
        for key, value in self.match_labels.items():
            if labels.get(key) != value:
                return False
        return all(requirement.matches(labels) for requirement in self.match_expressions)


# --- affinity and tolerations (core/v1 shapes) ----------------------------------------


class NodeSelectorRequirement(V1Model):
    """``v1.NodeSelectorRequirement``; Gt and Lt compare one integer value."""

    key: Annotated[str, Field(min_length=1)]
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: list[str] = []

    @model_validator(mode="after")
    def _values_fit_operator(self) -> NodeSelectorRequirement:
        _check_values(self.operator, self.values)
        if self.operator in ("Gt", "Lt") and (
            len(self.values) != 1 or not re.fullmatch(r"-?[0-9]+", self.values[0])
        ):
            raise ValueError(f"operator {self.operator} takes exactly one integer value")
        return self


class NodeSelectorTerm(V1Model):
    """``v1.NodeSelectorTerm``: its requirements are ANDed."""

    match_expressions: list[NodeSelectorRequirement] = []
    match_fields: list[NodeSelectorRequirement] = []


class NodeSelector(V1Model):
    """``v1.NodeSelector``: the terms are ORed."""

    node_selector_terms: Annotated[list[NodeSelectorTerm], Field(min_length=1)]


class PreferredSchedulingTerm(V1Model):
    """``v1.PreferredSchedulingTerm``."""

    weight: Weight
    preference: NodeSelectorTerm


class NodeAffinity(V1Model):
    """``v1.NodeAffinity``."""

    required_during_scheduling_ignored_during_execution: NodeSelector | None = None
    preferred_during_scheduling_ignored_during_execution: list[PreferredSchedulingTerm] = []


class PodAffinityTerm(V1Model):
    """``v1.PodAffinityTerm``."""

    label_selector: LabelSelector | None = None
    namespace_selector: LabelSelector | None = None
    namespaces: list[str] = []
    topology_key: Annotated[QualifiedName, Field(min_length=1)]
    match_label_keys: list[QualifiedName] = []
    mismatch_label_keys: list[QualifiedName] = []


class WeightedPodAffinityTerm(V1Model):
    """``v1.WeightedPodAffinityTerm``."""

    weight: Weight
    pod_affinity_term: PodAffinityTerm


class PodAffinity(V1Model):
    """``v1.PodAffinity`` (``v1.PodAntiAffinity`` has the same shape)."""

    required_during_scheduling_ignored_during_execution: list[PodAffinityTerm] = []
    preferred_during_scheduling_ignored_during_execution: list[WeightedPodAffinityTerm] = []


class Affinity(V1Model):
    """``v1.Affinity``."""

    node_affinity: NodeAffinity | None = None
    pod_affinity: PodAffinity | None = None
    pod_anti_affinity: PodAffinity | None = None


class Toleration(V1Model):
    """``v1.Toleration``."""

    key: QualifiedName | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: LabelValue | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Toleration:
        if self.operator == "Exists" and self.value:
            raise ValueError("operator Exists takes no value")
        if self.key is None and self.operator != "Exists":
            raise ValueError("a toleration without a key needs operator Exists")
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise ValueError("tolerationSeconds needs effect NoExecute")
        return self


# --- what a policy injects -------------------------------------------------------------


class MigResourceMapping(V1Model):
    """Rename a container resource (requests and limits) to a MIG instance resource."""

    source: Annotated[str, Field(alias="from", pattern=RESOURCE_NAME_PATTERN)] = "nvidia.com/gpu"
    """Resource to rename (default ``nvidia.com/gpu``); its quantity is kept."""
    to: Annotated[str, Field(pattern=MIG_RESOURCE_PATTERN)]
    """MIG resource, e.g. ``nvidia.com/mig-3g.40gb``."""


class FlinkHints(V1Model):
    """Hints for Flink pods, written as ``kubesage.io/flink-*`` annotations."""

    initial_parallelism: Annotated[int, Field(ge=1, le=32768)] | None = None
    """Parallelism the job starts with before the autoscaler takes over."""
    max_parallelism: Annotated[int, Field(ge=1, le=32768)] | None = None
    """Upper bound the autoscaler may scale to."""
    checkpoint_group: LabelValue | None = None
    """Jobs in one group get staggered checkpoint phases (they never checkpoint together)."""

    @model_validator(mode="after")
    def _bounds(self) -> FlinkHints:
        if (
            self.initial_parallelism is not None
            and self.max_parallelism is not None
            and self.initial_parallelism > self.max_parallelism
        ):
            raise ValueError("initialParallelism is above maxParallelism")
        return self

    def annotations(self) -> dict[str, str]:
        """The annotations these hints stand for."""
        pairs = {
            FLINK_INITIAL_PARALLELISM_ANNOTATION: self.initial_parallelism,
            FLINK_MAX_PARALLELISM_ANNOTATION: self.max_parallelism,
            FLINK_CHECKPOINT_GROUP_ANNOTATION: self.checkpoint_group,
        }
        return {key: str(value) for key, value in pairs.items() if value is not None}


class SparkHints(V1Model):
    """Locality for Spark pods: prefer the topology domain holding the app's other pods."""

    locality: Literal["node", "rack", "zone"]
    """Domain the executors of one application should share."""
    rack_label: QualifiedName = DEFAULT_RACK_LABEL
    """Node label naming the rack (used when ``locality`` is ``rack``)."""
    weight: Weight = 50
    """Weight of the preferred pod-affinity term."""

    @property
    def topology_key(self) -> str:
        """The node label that defines the locality domain."""
        return {"node": HOSTNAME_LABEL, "rack": self.rack_label, "zone": ZONE_LABEL}[self.locality]


class Injection(V1Model):
    """What a policy adds to a matching pod (only fields the pod has not set yet)."""

    scheduler_name: DnsSubdomain | None = None
    """Scheduler to hand the pod to (replaces only an unset or ``default-scheduler``)."""
    affinity: Affinity | None = None
    """Merged into the pod's affinity: required node terms ANDed, other terms appended."""
    tolerations: list[Toleration] = []
    annotations: dict[QualifiedName, str] = {}
    labels: dict[QualifiedName, LabelValue] = {}
    mig_resources: list[MigResourceMapping] = []
    """Container resources to rename to MIG instance resources."""
    flink: FlinkHints | None = None
    spark: SparkHints | None = None

    @model_validator(mode="after")
    def _meaningful(self) -> Injection:
        if not self.to_v1():
            raise ValueError("inject sets nothing")
        sources = [mapping.source for mapping in self.mig_resources]
        if len(sources) != len(set(sources)):
            raise ValueError("migResources renames one resource twice")
        return self


class SchedulingPolicySpec(V1Model):
    """``spec`` of a SchedulingPolicy."""

    priority: Annotated[int, Field(ge=-1000, le=1000)] = 0
    """Higher applies first and wins where policies overlap; ties go by name."""
    pod_selector: LabelSelector
    """Pods the policy applies to (``{}`` selects every pod)."""
    namespace_selector: LabelSelector | None = None
    """Namespaces whose pods it applies to (absent: all the webhook sees)."""
    inject: Injection


class PolicyMetadata(V1Model):
    """The parts of ``metadata`` a policy file may set."""

    name: DnsSubdomain
    labels: dict[QualifiedName, LabelValue] = {}
    annotations: dict[QualifiedName, str] = {}


class SchedulingPolicy(V1Model):
    """A whole ``kubesage.io/v1alpha1`` SchedulingPolicy object."""

    api_version: Literal["kubesage.io/v1alpha1"]
    kind: Literal["SchedulingPolicy"]
    metadata: PolicyMetadata
    spec: SchedulingPolicySpec

    @property
    def name(self) -> str:
        return self.metadata.name

    def selects(self, pod_labels: Mapping[str, str], namespace_labels: Mapping[str, str]) -> bool:
        """True when the pod and its namespace satisfy the policy's selectors."""
        if not self.spec.pod_selector.matches(pod_labels):
            return False
        selector = self.spec.namespace_selector
        return selector is None or selector.matches(namespace_labels)


def by_priority(policies: list[SchedulingPolicy]) -> list[SchedulingPolicy]:
    """Policies in application order: highest priority first, then by name."""
    return sorted(policies, key=lambda policy: (-policy.spec.priority, policy.name))


# --- loading ---------------------------------------------------------------------------


def field_path(loc: tuple[int | str, ...]) -> str:
    """``('spec', 'tolerations', 0, 'key')`` → ``spec.tolerations[0].key``."""
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def parse_policy(document: Any, *, source: Path | str = "<policy>") -> SchedulingPolicy:
    """Decode one YAML/JSON document; ConfigError names ``source`` and the field path."""
    if not isinstance(document, dict):
        raise ConfigError("a SchedulingPolicy must be a mapping", path=source)
    try:
        return SchedulingPolicy.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        message = "unknown field" if first["type"] == "extra_forbidden" else first["msg"]
        message = message.removeprefix("Value error, ")
        raise ConfigError(message, path=source, field=field_path(first["loc"]) or None) from None


def load_policy_file(path: Path | str) -> list[SchedulingPolicy]:
    """Every policy in a YAML file (``---`` separates several; empty documents skipped)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", path=path) from exc
    try:
        documents = [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as exc:
        raise ConfigError(f"not valid YAML: {exc}", path=path) from exc
    if len(documents) == 1:
        return [parse_policy(documents[0], source=path)]
    return [
        parse_policy(document, source=f"{path} (document {index + 1})")
        for index, document in enumerate(documents)
    ]


# --- the CRD ---------------------------------------------------------------------------

_DROPPED_KEYWORDS = frozenset({"title", "default", "propertyNames", "$defs"})


def _structural(schema: Any, defs: Mapping[str, Any]) -> Any:
    """Pydantic JSON schema → a Kubernetes structural schema (no $ref, anyOf or false maps)."""
    if isinstance(schema, list):
        return [_structural(item, defs) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        resolved = dict(defs[schema["$ref"].rsplit("/", 1)[-1]])
        resolved.update({k: v for k, v in schema.items() if k != "$ref"})
        return _structural(resolved, defs)
    if "anyOf" in schema:
        options = [option for option in schema["anyOf"] if option.get("type") != "null"]
        if len(options) != 1:
            raise TypeError(f"only Optional unions map to a structural schema: {schema}")
        merged = {**options[0], **{k: v for k, v in schema.items() if k != "anyOf"}}
        return _structural(merged, defs)
    result: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _DROPPED_KEYWORDS or (key == "additionalProperties" and value is False):
            continue
        if key == "description":
            result[key] = value.replace("``", "`")  # rST literals read badly in kubectl explain
        elif key == "patternProperties":
            # Structural schemas cannot constrain map keys; the loader still checks them.
            (value_schema,) = value.values()
            result["additionalProperties"] = _structural(value_schema, defs)
        elif key == "const":
            result["enum"] = [value]
        elif key == "properties":
            result[key] = {name: _structural(prop, defs) for name, prop in value.items()}
        else:
            result[key] = _structural(value, defs)
    if "properties" in result and "type" not in result:
        result["type"] = "object"
    return result


def openapi_schema() -> dict[str, Any]:
    """The CRD version's ``openAPIV3Schema``, derived from :class:`SchedulingPolicySpec`."""
    raw = SchedulingPolicySpec.model_json_schema(by_alias=True, mode="validation")
    spec = _structural(raw, raw.get("$defs", {}))
    spec["description"] = "What the policy selects and what it injects into selected pods."
    return {
        "type": "object",
        "description": "Scheduling policy the kubesage admission webhook injects into pods.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
        },
    }


def crd_manifest() -> dict[str, Any]:
    """The ``apiextensions.k8s.io/v1`` CustomResourceDefinition of SchedulingPolicy."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": ["spol"],
                "categories": ["kubesage"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": openapi_schema()},
                    "additionalPrinterColumns": [
                        {"name": "Priority", "type": "integer", "jsonPath": ".spec.priority"},
                        {
                            "name": "Scheduler",
                            "type": "string",
                            "jsonPath": ".spec.inject.schedulerName",
                        },
                        {
                            "name": "Age",
                            "type": "date",
                            "jsonPath": ".metadata.creationTimestamp",
                        },
                    ],
                }
            ],
        },
    }


def render_crd_yaml() -> str:
    """The CRD as the YAML file kept in ``deploy/base``."""
    header = (
        "# Generated from kubesage.core.k8s.scheduling_policy; do not edit by hand.\n"
        "# Regenerate: python -m kubesage.core.k8s.scheduling_policy "
        "> deploy/base/crd-schedulingpolicy.yaml\n"
    )
    return header + yaml.safe_dump(crd_manifest(), sort_keys=False, width=100)


if __name__ == "__main__":  # pragma: no cover - a generator entry point
    sys.stdout.write(render_crd_yaml())
