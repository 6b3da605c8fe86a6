"""Which nodes the required anti-affinity of the pods already placed keeps a pod off.

kube-scheduler's InterPodAffinity filter checks both sides: the incoming pod's own
terms (kubesage never binds a pod that has required ones:
:mod:`~kubesage.core.k8s.unsupported_constraints`) and the terms of the pods already
running. A running pod Q with a required ``podAntiAffinity`` term repels an incoming pod
P from every node in Q's topology domain (the nodes whose ``topologyKey`` label has the
value of Q's node) when the term selects P:

- its namespaces hold P's: ``namespaces``, plus those ``namespaceSelector`` matches (an
  empty selector: every namespace), else Q's own namespace. A non-empty
  ``namespaceSelector`` is matched against the labels of P's namespace where the caller
  knows them (``namespace_labels``, the namespace cache of ``kubesage serve``); where it
  does not — no cache, a namespace the cache has not listed, a selector on labels it
  cannot know — the term is taken to select P, the safe side (P may wait longer; it is
  never bound where Q repels it);
- its ``labelSelector`` matches P's labels (a missing selector matches nothing, an empty
  one everything), with ``matchLabelKeys`` / ``mismatchLabelKeys`` adding Q's own values
  of those keys (``In`` / ``NotIn``), as the API server folds them in.

A node without the ``topologyKey`` label is in no domain, so no term repels a pod from it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kubesage.core.arrays import BoolArray
from kubesage.core.k8s.node_eligibility import expression_matches
from kubesage.core.k8s.schedulable import bound_node
from kubesage.core.k8s.scheduling_policy import NameOnlyLabels, NamespaceLabels
from kubesage.core.k8s.unsupported_constraints import REQUIRED_TERMS


@dataclass(frozen=True)
class Selector:
    """A label selector in the API's dict form (``matchLabels`` and ``matchExpressions``),
    read as it is: a running pod's terms were admitted by the API server, so they are
    not validated again on every cycle (:class:`~kubesage.core.k8s.v1_models.LabelSelector`
    is the validating form, for what kubesage reads from users)."""

    match_labels: tuple[tuple[str, str], ...]
    expressions: tuple[Mapping[str, Any], ...]

    @classmethod
    def of(cls, selector: Mapping[str, Any]) -> Selector:
        expressions = [e for e in selector.get("matchExpressions") or () if isinstance(e, Mapping)]
        labels = selector.get("matchLabels") or {}
        return cls(tuple(sorted((str(k), str(v)) for k, v in labels.items())), tuple(expressions))

    def keys(self) -> set[str]:
        return {key for key, _ in self.match_labels} | {
            str(e.get("key") or "") for e in self.expressions
        }

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(key) == value for key, value in self.match_labels) and all(
            expression_matches(expression, labels) for expression in self.expressions
        )


@dataclass(frozen=True)
class Repeller:
    """One required anti-affinity term of a placed pod, where it holds."""

    namespaces: frozenset[str] | None
    """The namespaces it names, whose pods it repels (None: every namespace)."""
    namespace_selector: Selector | None
    """Its non-empty ``namespaceSelector``: the namespaces it matches are repelled too."""
    pods: Selector
    topology_key: str
    domain: str
    """The value of ``topology_key`` on the placed pod's node."""

    def selects(
        self, namespace: str, labels: Mapping[str, str], namespace_labels: NamespaceLabels | None
    ) -> bool:
        """Whether a pod of ``namespace`` with ``labels`` is repelled by this term; a
        ``namespaceSelector`` whose answer the namespace's known labels cannot give selects."""
        if not self.pods.matches(labels):
            return False
        if self.namespaces is None or namespace in self.namespaces:
            return True
        if self.namespace_selector is None:
            return False
        if namespace_labels is None:
            return True  # not known: the safe side
        known = namespace_labels(namespace)
        if not NameOnlyLabels.answer(self.namespace_selector.keys(), known):
            return True
        return self.namespace_selector.matches(known)


def _terms(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    spec = pod.get("spec")
    affinity = spec.get("affinity") if isinstance(spec, Mapping) else None
    anti = affinity.get("podAntiAffinity") if isinstance(affinity, Mapping) else None
    terms = anti.get(REQUIRED_TERMS) if isinstance(anti, Mapping) else None
    if not isinstance(terms, Sequence) or isinstance(terms, str):
        return []
    return [term for term in terms if isinstance(term, Mapping)]


def _repeller(
    term: Mapping[str, Any], pod: Mapping[str, Any], node_labels: Mapping[str, str]
) -> Repeller | None:
    """The term of placed ``pod`` on a node with ``node_labels``; None when it repels
    nothing (no selector, or its node is in no domain of the key)."""
    selector = term.get("labelSelector")
    key = str(term.get("topologyKey") or "")
    if not isinstance(selector, Mapping) or not key or key not in node_labels:
        return None
    metadata = pod.get("metadata") or {}
    own_labels = metadata.get("labels") or {}
    listed = frozenset(str(n) for n in term.get("namespaces") or ())
    by_selector = term.get("namespaceSelector")
    namespace_selector = None
    namespaces: frozenset[str] | None = listed
    if isinstance(by_selector, Mapping):
        namespace_selector = Selector.of(by_selector)
        if not namespace_selector.keys():
            namespaces, namespace_selector = None, None  # {}: every namespace
    elif not listed:
        namespaces = frozenset({str(metadata.get("namespace") or "default")})
    expressions = [e for e in selector.get("matchExpressions") or () if isinstance(e, Mapping)]
    for keys, operator in (("matchLabelKeys", "In"), ("mismatchLabelKeys", "NotIn")):
        for label in term.get(keys) or ():
            if label in own_labels:
                expressions.append(
                    {"key": label, "operator": operator, "values": [own_labels[label]]}
                )
    pods = Selector.of({**selector, "matchExpressions": expressions})
    return Repeller(namespaces, namespace_selector, pods, key, node_labels[key])


class RepelIndex:
    """The anti-affinity terms of the placed pods, and per incoming pod the nodes they
    keep it off (a mask over ``node_names``), for one scheduling cycle; a term's
    ``namespaceSelector`` is matched on ``namespace_labels`` where given (else it selects)."""

    def __init__(
        self,
        placed: Iterable[Mapping[str, Any]],
        nodes: Mapping[str, Mapping[str, Any]],
        node_names: Sequence[str],
        namespace_labels: NamespaceLabels | None = None,
    ) -> None:
        self._namespace_labels = namespace_labels
        labels = {
            name: dict((node.get("metadata") or {}).get("labels") or {})
            for name, node in nodes.items()
        }
        self._node_labels = [labels.get(name, {}) for name in node_names]
        self.repellers: list[Repeller] = []
        for pod in placed:
            node = bound_node(pod)
            if node is None or node not in labels:
                continue
            for term in _terms(pod):
                repeller = _repeller(term, pod, labels[node])
                if repeller is not None:
                    self.repellers.append(repeller)
        self._masks: dict[tuple[str, tuple[tuple[str, str], ...]], BoolArray | None] = {}
        self._narrowed: dict[tuple[int, int], tuple[BoolArray, BoolArray, BoolArray]] = {}

    def allowed(self, pod: Mapping[str, Any]) -> BoolArray | None:
        """The nodes no placed pod's term keeps ``pod`` off (None: every node)."""
        if not self.repellers:
            return None
        metadata = pod.get("metadata") or {}
        namespace = str(metadata.get("namespace") or "default")
        labels = {str(k): str(v) for k, v in (metadata.get("labels") or {}).items()}
        key = (namespace, tuple(sorted(labels.items())))
        if key not in self._masks:
            domains = {
                (r.topology_key, r.domain)
                for r in self.repellers
                if r.selects(namespace, labels, self._namespace_labels)
            }
            mask = np.array(
                [not any(node.get(k) == v for k, v in domains) for node in self._node_labels],
                dtype=bool,
            )
            self._masks[key] = None if bool(mask.all()) else mask
        return self._masks[key]

    def narrow(self, eligible: BoolArray | None, pod: Mapping[str, Any]) -> BoolArray | None:
        """``eligible`` (a node filter's mask, None: every node) less the nodes the placed
        pods' terms keep ``pod`` off."""
        allowed = self.allowed(pod)
        if allowed is None:
            return eligible
        if eligible is None:
            return allowed
        # one array per pair, kept (with its inputs, so no id is reused) for the cycle:
        # callers may key their own caches on the mask's identity
        key = (id(eligible), id(allowed))
        if key not in self._narrowed:
            self._narrowed[key] = (eligible, allowed, eligible & allowed)
        return self._narrowed[key][2]


def repelled_from(
    pod: Mapping[str, Any],
    node: str,
    placed: Iterable[Mapping[str, Any]],
    nodes: Mapping[str, Mapping[str, Any]],
    namespace_labels: NamespaceLabels | None = None,
) -> str | None:
    """Why a running pod's required anti-affinity keeps ``pod`` off ``node`` (None: none
    does), for the check just before a bind."""
    index = RepelIndex(placed, nodes, [node], namespace_labels)
    allowed = index.allowed(pod)
    if allowed is None or bool(allowed[0]):
        return None
    return (
        f"InterPodAffinity: a running pod's required podAntiAffinity keeps this pod out of "
        f"node {node}'s topology domain"
    )
