"""The one bind path: the placement is in the state before the API call, for every policy."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from kubesage.core.annotations import GPU_INDICES_ANNOTATION
from kubesage.core.errors import DependencyError
from kubesage.core.k8s.binder import placement_annotations
from kubesage.core.k8s.binding import (
    BindRefusedError,
    BindTarget,
    LockedState,
    assume_and_bind,
)
from kubesage.core.policy import PolicyContext, make_policy, policy_names
from kubesage.core.state import ClusterState
from kubesage.core.types import Placement, PodRequest
from tests.builders import node, pod

WORKLOAD = (pod("w", milli=500), pod("v", gpus=2))


class AccountingState(LockedState):
    """A state that accounts assumed pods as ClusterSync does."""

    def __init__(self, state: ClusterState) -> None:
        super().__init__(state)
        self.assumed: dict[str, tuple[PodRequest, Placement]] = {}
        self.finished: list[str] = []

    def assume(self, pod: Mapping[str, Any], request: PodRequest, placement: Placement) -> None:
        with self.locked() as (state, _):
            state.allocate(request, placement)
            self.assumed[pod["metadata"]["uid"]] = (request, placement)

    def forget(self, pod: Mapping[str, Any]) -> None:
        with self.locked() as (state, _):
            request, placement = self.assumed.pop(pod["metadata"]["uid"])
            state.release(request, placement)

    def finish_binding(self, pod: Mapping[str, Any]) -> None:
        self.finished.append(pod["metadata"]["uid"])


class RecordingBinder:
    """Records each Binding with what the state held at the moment it was posted."""

    def __init__(self, view: AccountingState, *, fail: bool = False) -> None:
        self.view = view
        self.fail = fail
        self.crash = False
        """Raise an unexpected error (not a KubesageError) from the post."""
        self.posts: list[tuple[str, dict[str, str] | None, int]] = []

    def bind(
        self,
        namespace: str,
        name: str,
        uid: str,
        node: str,
        *,
        annotations: dict[str, str] | None = None,
    ) -> None:
        index = self.view.state.node_index[node]
        self.posts.append((node, annotations, int(self.view.state.gpu_free_milli_node[index])))
        if self.fail:
            raise DependencyError("the API server said no")
        if self.crash:
            raise TypeError("a client bug")


def target(request: PodRequest | None, node_name: str = "b") -> BindTarget:
    return BindTarget(namespace="ml", name="p", uid="uid-p", node=node_name, request=request)


def setup(name: str, *, fail: bool = False) -> tuple[AccountingState, RecordingBinder, Any]:
    view = AccountingState(ClusterState([node("a", gpus=2), node("b", gpus=8)]))
    binder = RecordingBinder(view, fail=fail)
    policy = make_policy(name, PolicyContext(seed=0, workload=WORKLOAD))
    return view, binder, assume_and_bind(view, binder, policy)


@pytest.mark.parametrize("name", policy_names())
def test_every_policy_is_accounted_before_the_binding_is_posted(name: str) -> None:
    view, binder, bind = setup(name)
    request = pod("p", gpus=2)
    bind(target(request))
    placement = view.assumed["uid-p"][1]
    assert placement.node == "b" and len(placement.gpu_indices) == 2
    # When the Binding went out, the two GPUs were already taken in the state.
    assert binder.posts == [("b", placement_annotations(placement), 6000)]
    assert binder.posts[0][1] is not None and GPU_INDICES_ANNOTATION in binder.posts[0][1]
    assert view.finished == ["uid-p"]  # the assumption's expiry starts after the post


@pytest.mark.parametrize("name", ["fgd", "ppo"])
def test_a_failed_post_gives_the_resources_back(name: str) -> None:
    view, _, bind = setup(name, fail=True)
    before = view.state.gpu_free_milli.copy()
    with pytest.raises(DependencyError, match="said no"):
        bind(target(pod("p", milli=300)))
    assert view.assumed == {} and view.finished == []
    assert (view.state.gpu_free_milli == before).all()


def test_an_unexpected_error_from_the_post_gives_the_resources_back_too() -> None:
    view, binder, bind = setup("fgd")
    binder.crash = True
    before = view.state.gpu_free_milli.copy()
    with pytest.raises(TypeError, match="a client bug"):
        bind(target(pod("p", gpus=2)))
    assert view.assumed == {} and view.finished == []
    assert (view.state.gpu_free_milli == before).all()


def test_a_pod_that_no_longer_fits_is_refused_without_a_post() -> None:
    view, binder, bind = setup("fgd")
    with pytest.raises(BindRefusedError, match="no longer fits on a"):
        bind(target(pod("p", gpus=4), "a"))
    with pytest.raises(BindRefusedError, match="no longer fits on gone"):
        bind(target(pod("p", gpus=1), "gone"))
    assert binder.posts == [] and view.assumed == {}


def test_a_pod_filter_never_saw_is_posted_without_accounting() -> None:
    view, binder, bind = setup("ppo")
    bind(target(None))
    assert binder.posts == [("b", None, 8000)] and view.assumed == {}
