"""The running pods' required anti-affinity, as kube-scheduler's InterPodAffinity filter
reads it (``kubesage.core.k8s.existing_anti_affinity``)."""

from __future__ import annotations

from typing import Any

import pytest

from kubesage.core.k8s.existing_anti_affinity import RepelIndex
from kubesage.core.k8s.scheduling_policy import name_only_namespace_labels

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
NODES = {
    name: {"metadata": {"name": name, "labels": labels}}
    for name, labels in {
        "a1": {"kubernetes.io/hostname": "a1", "zone": "a"},
        "a2": {"kubernetes.io/hostname": "a2", "zone": "a"},
        "b1": {"kubernetes.io/hostname": "b1", "zone": "b"},
        "bare": {"kubernetes.io/hostname": "bare"},  # no zone label: in no zone domain
    }.items()
}
NAMES = list(NODES)


def placed(node: str, term: dict[str, Any], labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "q", "namespace": "ml", "labels": labels or {"app": "q"}},
        "spec": {"nodeName": node, "affinity": {"podAntiAffinity": {REQUIRED: [term]}}},
    }


def incoming(namespace: str = "ml", **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": namespace, "labels": labels}}


def allowed(index: RepelIndex, pod: dict[str, Any]) -> list[str] | None:
    mask = index.allowed(pod)
    return None if mask is None else [n for n, ok in zip(NAMES, mask, strict=True) if ok]


def test_a_zone_term_repels_the_pods_it_selects_from_the_whole_zone() -> None:
    term = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "zone"}
    index = RepelIndex([placed("a1", term)], NODES, NAMES)
    assert allowed(index, incoming(app="web")) == ["b1", "bare"]
    assert allowed(index, incoming(app="db")) is None  # not selected
    assert allowed(index, incoming("other", app="web")) is None  # the term's namespace only


@pytest.mark.parametrize(
    ("term", "repels"),
    [
        ({"topologyKey": "zone"}, False),  # no labelSelector: selects nothing
        ({"labelSelector": {}, "topologyKey": "zone"}, True),  # empty: every pod
        ({"labelSelector": {}, "topologyKey": "rack"}, False),  # its node has no rack
        (
            {
                "labelSelector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]},
                "topologyKey": "zone",
                "namespaceSelector": {},  # every namespace
            },
            True,
        ),
    ],
)
def test_what_a_term_selects(term: dict[str, Any], repels: bool) -> None:
    index = RepelIndex([placed("a1", term)], NODES, NAMES)
    namespace = "other" if "namespaceSelector" in term else "ml"
    assert allowed(index, incoming(namespace, app="web")) == (["b1", "bare"] if repels else None)


def test_match_label_keys_take_the_running_pods_own_values() -> None:
    term = {
        "labelSelector": {"matchLabels": {"app": "train"}},
        "topologyKey": "kubernetes.io/hostname",
        "matchLabelKeys": ["run"],
    }
    index = RepelIndex([placed("a1", term, {"app": "train", "run": "7"})], NODES, NAMES)
    assert allowed(index, incoming(app="train", run="7")) == ["a2", "b1", "bare"]
    assert allowed(index, incoming(app="train", run="8")) is None  # another run's pod


def test_without_running_terms_nothing_is_ruled_out() -> None:
    plain = {"metadata": {"name": "x", "namespace": "ml"}, "spec": {"nodeName": "a1"}}
    index = RepelIndex([plain], NODES, NAMES)
    assert index.repellers == [] and index.allowed(incoming(app="web")) is None


NAMESPACE_LABELS = {"research": {"team": "ml"}, "shop": {"team": "web"}, "ml": {}}


def known(namespace: str) -> dict[str, str]:
    """Labels as the namespace cache answers: the API server's name label on each, the
    name only for a namespace it has not listed."""
    if namespace not in NAMESPACE_LABELS:
        return name_only_namespace_labels(namespace)
    return {**NAMESPACE_LABELS[namespace], "kubernetes.io/metadata.name": namespace}


def test_a_namespace_selector_is_matched_on_the_namespaces_labels() -> None:
    term = {
        "labelSelector": {},
        "topologyKey": "zone",
        "namespaceSelector": {"matchLabels": {"team": "ml"}},
        "namespaces": ["shop"],
    }
    index = RepelIndex([placed("a1", term)], NODES, NAMES, known)
    assert allowed(index, incoming("research")) == ["b1", "bare"]  # labelled team=ml
    assert allowed(index, incoming("shop")) == ["b1", "bare"]  # named
    # With a selector the term's own namespace is not implied, and ml is not team=ml.
    assert allowed(index, incoming("ml")) is None
    # A namespace whose labels are not known (not listed yet): the safe side.
    assert allowed(index, incoming("new")) == ["b1", "bare"]
    # Without the namespaces' labels every namespace is taken to match.
    assert allowed(RepelIndex([placed("a1", term)], NODES, NAMES), incoming("ml")) == [
        "b1",
        "bare",
    ]


def test_a_selector_on_the_name_label_needs_no_other_label() -> None:
    term = {
        "labelSelector": {},
        "topologyKey": "zone",
        "namespaceSelector": {
            "matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["research"]}
            ]
        },
    }
    index = RepelIndex([placed("a1", term)], NODES, NAMES, known)
    assert allowed(index, incoming("new")) is None  # its name is known: not research
    assert allowed(index, incoming("research")) == ["b1", "bare"]
