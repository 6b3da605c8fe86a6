"""Kubernetes' own object shapes that a SchedulingPolicy carries, as strict pydantic models.

``metav1.LabelSelector`` (with its matching semantics), the ``core/v1`` affinity and
toleration shapes, and the name rules of label keys, label values and DNS subdomains.
They follow the API's field names and the API server's validation of these fields
(label keys and values, ``matchFields`` on ``metadata.name`` only, namespaces, label
keys beside a selector), so what a policy injects is what the API server accepts.
:class:`V1Model` is their base: strict, frozen, unknown keys rejected, camelCase on
the wire.

Label selectors follow ``metav1.LabelSelector`` exactly: ``matchLabels`` and every
``matchExpressions`` entry are ANDed; ``In`` needs the key with one of the values,
``NotIn`` matches when the key is absent or its value is none of the values,
``Exists``/``DoesNotExist`` test the key only; an empty selector matches everything.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    model_validator,
)
from pydantic.alias_generators import to_camel

from kubesage.core.errors import InputError

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = rf"{_DNS_LABEL}(\.{_DNS_LABEL})*"
_NAME_PART = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
QUALIFIED_NAME_PATTERN = rf"^({_DNS_SUBDOMAIN}/)?{_NAME_PART}$"
LABEL_VALUE_PATTERN = rf"^({_NAME_PART})?$"
DNS_SUBDOMAIN_PATTERN = rf"^{_DNS_SUBDOMAIN}$"
DNS_LABEL_PATTERN = rf"^{_DNS_LABEL}$"
"""A DNS-1123 label (a namespace's name, ≤ 63 characters)."""


def namespaced_name(text: str, option: str, kind: str) -> tuple[str, str]:
    """``NAMESPACE/NAME`` of a ``kind`` object as an option gives it; an InputError naming
    ``option`` and the part at fault (the namespace a DNS-1123 label, the name a
    DNS-1123 subdomain, as the API server requires)."""
    namespace, slash, name = text.partition("/")
    if not slash or not namespace or not name:
        raise InputError(f"{option} '{text}': expected NAMESPACE/NAME of a {kind}")
    if len(namespace) > 63 or not re.fullmatch(DNS_LABEL_PATTERN, namespace):
        raise InputError(
            f"{option} '{text}': namespace '{namespace}' is not a DNS-1123 label "
            "(lowercase letters, digits and '-', ≤ 63 characters)"
        )
    if len(name) > 253 or not re.fullmatch(DNS_SUBDOMAIN_PATTERN, name):
        raise InputError(
            f"{option} '{text}': name '{name}' is not a DNS-1123 subdomain "
            "(lowercase letters, digits, '-' and '.', ≤ 253 characters)"
        )
    return namespace, name


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
_LABEL_KEY: TypeAdapter[str] = TypeAdapter(QualifiedName)


def check_label_key(key: str, what: str) -> str:
    """``key`` when it is a valid label key (what the API server accepts in a node
    selector or a topology key: :data:`QualifiedName`); InputError naming ``what`` if not."""
    try:
        return _LABEL_KEY.validate_python(key)
    except ValidationError:
        raise InputError(
            f"{what} {key!r} is not a Kubernetes label key: an optional DNS-subdomain prefix "
            "and '/', then a name of letters, digits, '-', '_' and '.' (≤ 63 characters)"
        ) from None


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

    def keys(self) -> set[str]:
        """The label keys the selector tests."""
        return set(self.match_labels) | {r.key for r in self.match_expressions}

    def matches(self, labels: Mapping[str, str]) -> bool:
        """True when ``labels`` satisfy every ``matchLabels`` pair and every expression."""
        for key, value in self.match_labels.items():
            if labels.get(key) != value:
                return False
        return all(requirement.matches(labels) for requirement in self.match_expressions)


# --- affinity and tolerations (core/v1 shapes) ----------------------------------------


class NodeSelectorRequirement(V1Model):
    """``v1.NodeSelectorRequirement`` of ``matchExpressions`` (a label key, label values)."""

    # In and NotIn compare label values, Gt and Lt one integer value.

    key: QualifiedName
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: list[str] = []

    @model_validator(mode="after")
    def _values_fit_operator(self) -> NodeSelectorRequirement:
        _check_values(self.operator, self.values)
        if self.operator in ("Gt", "Lt") and (
            len(self.values) != 1 or not re.fullmatch(r"-?[0-9]+", self.values[0])
        ):
            raise ValueError(f"operator {self.operator} takes exactly one integer value")
        for value in self.values if self.operator in ("In", "NotIn") else ():
            if len(value) > 63 or not re.fullmatch(LABEL_VALUE_PATTERN, value):
                raise ValueError(
                    f"value {value!r} is not a label value (letters, digits, '-', '_' and "
                    "'.', starting and ending with a letter or digit, ≤ 63 characters)"
                )
        return self


class NodeFieldSelectorRequirement(V1Model):
    """``v1.NodeSelectorRequirement`` of ``matchFields`` (``metadata.name``, one value)."""

    # The API server knows this one node field, with In or NotIn and exactly one value.

    key: Literal["metadata.name"]
    operator: Literal["In", "NotIn"]
    values: Annotated[list[str], Field(min_length=1, max_length=1)]


class NodeSelectorTerm(V1Model):
    """``v1.NodeSelectorTerm``: its requirements are ANDed."""

    match_expressions: list[NodeSelectorRequirement] = []
    match_fields: list[NodeFieldSelectorRequirement] = []


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
    namespaces: list[Annotated[str, Field(pattern=DNS_LABEL_PATTERN, max_length=63)]] = []
    topology_key: Annotated[QualifiedName, Field(min_length=1)]
    match_label_keys: list[QualifiedName] = []
    mismatch_label_keys: list[QualifiedName] = []

    @model_validator(mode="after")
    def _label_keys(self) -> PodAffinityTerm:
        """The API server's rules: label keys only beside a ``labelSelector``, and no key
        both in ``matchLabelKeys`` and in ``mismatchLabelKeys``."""
        if (self.match_label_keys or self.mismatch_label_keys) and self.label_selector is None:
            raise ValueError("matchLabelKeys and mismatchLabelKeys need a labelSelector")
        both = sorted(set(self.match_label_keys) & set(self.mismatch_label_keys))
        if both:
            raise ValueError(f"{both} in both matchLabelKeys and mismatchLabelKeys")
        return self


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
