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

Selectors, affinity and tolerations are Kubernetes' own shapes
(:mod:`kubesage.core.k8s.v1_models`). The models are the single source of truth for
the CRD's schema too (:mod:`kubesage.core.k8s.policy_crd` derives it).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field, ValidationError, model_validator

from kubesage.core.config import load_yaml_all, read_config_text
from kubesage.core.errors import ConfigError, InputError
from kubesage.core.field_errors import config_error, yaml_error
from kubesage.core.k8s.mig_names import mig_profile_of, mig_shape
from kubesage.core.k8s.unsupported_constraints import not_implemented, unsupported_constraints
from kubesage.core.k8s.v1_models import (
    QUALIFIED_NAME_PATTERN,
    Affinity,
    DnsSubdomain,
    LabelSelector,
    LabelValue,
    QualifiedName,
    Toleration,
    V1Model,
    Weight,
)
from kubesage.core.topology.discovery import DEFAULT_RACK_LABEL, ZONE_LABEL

GROUP = "kubesage.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "SchedulingPolicy"
PLURAL = "schedulingpolicies"
SINGULAR = "schedulingpolicy"

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
"""Label the API server sets on every namespace to its name (selectable without a lookup)."""


class NameOnlyLabels(dict[str, str]):
    """The labels of a namespace kubesage has not read: its name only. The others are
    unknown, not absent, so a selector that tests them cannot be answered (a policy's
    does not match, :meth:`SchedulingPolicy.selects`; a running pod's anti-affinity term
    repels, the safe side): ``NotIn`` and ``DoesNotExist`` would match any absent label,
    and the namespace may well carry it."""

    @staticmethod
    def answer(keys: Collection[str], labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` can answer a selector that tests ``keys``: any real
        labels can, name-only labels only a selector on the name."""
        return not isinstance(labels, NameOnlyLabels) or not set(keys) - {NAMESPACE_NAME_LABEL}


NamespaceLabels = Callable[[str], Mapping[str, str]]
"""Labels of a namespace by name (a :class:`NameOnlyLabels` where only its name is known)."""


def name_only_namespace_labels(namespace: str) -> NameOnlyLabels:
    """The one namespace label known without an API call: its name (set by the API server)."""
    return NameOnlyLabels({NAMESPACE_NAME_LABEL: namespace})


FLINK_INITIAL_PARALLELISM_ANNOTATION = "kubesage.io/flink-initial-parallelism"
FLINK_MAX_PARALLELISM_ANNOTATION = "kubesage.io/flink-max-parallelism"
FLINK_CHECKPOINT_GROUP_ANNOTATION = "kubesage.io/flink-checkpoint-group"
"""Jobs sharing a checkpoint group get staggered checkpoint phases."""
SPARK_LOCALITY_ANNOTATION = "kubesage.io/spark-locality"
SPARK_APP_LABEL = "spark-app-selector"
"""Label Spark on Kubernetes puts on a driver and its executors (the application id)."""
HOSTNAME_LABEL = "kubernetes.io/hostname"

RESOURCE_NAME_PATTERN = QUALIFIED_NAME_PATTERN
MIG_RESOURCE_PATTERN = r"^nvidia\.com/mig-([0-9]+c\.)?[0-9]+g\.[0-9]+gb(\.me)?$"
"""MIG resources of the NVIDIA device plugin's mixed strategy, e.g. ``nvidia.com/mig-3g.40gb``."""

# --- what a policy injects -------------------------------------------------------------


class MigResourceMapping(V1Model):
    """Rename a container resource (requests and limits) to a MIG instance resource."""

    source: Annotated[str, Field(alias="from", pattern=RESOURCE_NAME_PATTERN)] = "nvidia.com/gpu"
    """Resource to rename (default ``nvidia.com/gpu``); its quantity is kept."""
    to: Annotated[str, Field(pattern=MIG_RESOURCE_PATTERN)]
    """MIG resource, e.g. ``nvidia.com/mig-3g.40gb``."""

    @model_validator(mode="after")
    def _a_profile_kubesage_reads(self) -> MigResourceMapping:
        """A name the pattern allows but no GPU has (``mig-9g.999gb``, a compute-instance
        form like ``mig-1c.3g.20gb``) would leave every renamed pod unschedulable."""
        try:
            mig_shape(mig_profile_of(self.to), "to")
        except InputError as exc:
            raise ValueError(str(exc)) from None
        return self


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
    tolerations: list[Toleration] = Field(default_factory=list)
    annotations: dict[QualifiedName, str] = Field(default_factory=dict)
    labels: dict[QualifiedName, LabelValue] = Field(default_factory=dict)
    mig_resources: list[MigResourceMapping] = Field(default_factory=list)
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
    labels: dict[QualifiedName, LabelValue] = Field(default_factory=dict)
    annotations: dict[QualifiedName, str] = Field(default_factory=dict)


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
        if selector is None:
            return True
        if not NameOnlyLabels.answer(selector.keys(), namespace_labels):
            return False  # it tests labels not known of this namespace: no guess
        return selector.matches(namespace_labels)

    def redirect_warnings(self, schedulers: Collection[str]) -> list[str]:
        """What is wrong with a policy that redirects pods to one of ``schedulers``
        (kubesage's) and adds required constraints that scheduler cannot honour
        (:mod:`~kubesage.core.k8s.unsupported_constraints`): the webhook redirects no
        pod that carries them, so the redirect never happens."""
        inject = self.spec.inject
        if inject.scheduler_name not in schedulers or inject.affinity is None:
            return []
        fields = unsupported_constraints({"spec": {"affinity": inject.affinity.to_v1()}})
        if not fields:
            return []
        return [
            f"policy {self.name} redirects no pod to {inject.scheduler_name}, as it adds"
            f" constraints {not_implemented(fields)}"
        ]


def by_priority(policies: list[SchedulingPolicy]) -> list[SchedulingPolicy]:
    """Policies in application order: highest priority first, then by name."""
    return sorted(policies, key=lambda policy: (-policy.spec.priority, policy.name))


# --- loading ---------------------------------------------------------------------------


def parse_policy(document: Any, *, source: Path | str = "<policy>") -> SchedulingPolicy:
    """Decode one YAML/JSON document; ConfigError names ``source`` and the field path."""
    if not isinstance(document, dict):
        raise ConfigError("a SchedulingPolicy must be a mapping", path=source)
    try:
        return SchedulingPolicy.model_validate(document)
    except ValidationError as exc:
        raise config_error(exc, path=source) from None


def load_policy_file(path: Path | str) -> list[SchedulingPolicy]:
    """Every policy in a YAML file (``---`` separates several; empty documents skipped)."""
    path = Path(path)
    text = read_config_text(path)
    try:
        documents = [doc for doc in load_yaml_all(text) if doc is not None]
    except yaml.YAMLError as exc:
        raise yaml_error(exc, path=path) from exc
    if len(documents) == 1:
        return [parse_policy(documents[0], source=path)]
    return [
        parse_policy(document, source=f"{path} (document {index + 1})")
        for index, document in enumerate(documents)
    ]
