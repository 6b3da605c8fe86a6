"""ClusterSync perceives GPUs from ResourceSlices (fake API server, real client), and
falls back to the extended resources where the cluster has no resource.k8s.io/v1."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from kubesage.core.errors import CapacityError
from kubesage.core.k8s.apiclient import load_api_client
from kubesage.core.k8s.dra_requests import ClaimsPendingError
from kubesage.core.k8s.informer import ClusterSync
from kubesage.core.k8s.translate import TranslateError, mig_shape
from kubesage.core.types import PodRequest
from tests.core.k8s import v1_container, v1_node, v1_pod
from tests.fakes import dra_fixtures as fx
from tests.fakes.apiserver import RESOURCE_SLICES, FakeApiServer, wait_until


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        yield server


def make_sync(fake: FakeApiServer, **options: Any) -> ClusterSync:
    api = load_api_client(str(fake.kubeconfig))
    assert api is not None
    return ClusterSync(api, backoff_s=0.02, max_backoff_s=0.1, watch_timeout_s=1, **options)


def gpus(sync: ClusterSync) -> dict[str, tuple[int, str | None, bool]]:
    """GPU count, model and MIG mode of every node in the state."""
    with sync.locked() as (state, names):
        return {
            name: (
                int(state.gpu_count[i]),
                state.nodes[i].gpu_model,
                bool(state.node_mig_enabled[i]),
            )
            for i, name in enumerate(names)
        }


def dra_node(name: str, **labels: str) -> dict[str, Any]:
    """A node whose GPUs the DRA driver publishes: no device plugin, no GFD labels."""
    return v1_node(name, gpus=0, rack="r1", extra_labels=labels)


def test_gpu_count_model_and_mig_mode_come_from_the_slices(fake: FakeApiServer) -> None:
    fake.add_node(dra_node("dgx-0"))
    fake.add_node(dra_node("mig-0"))
    fake.add_node(dra_node("part-0"))
    fake.add_node(v1_node("plugin-0", gpus=4))  # device plugin, no slices: labels
    fake.add_resource_slice(fx.dgx_h100_slice("dgx-0"))
    fake.add_resource_slice(fx.mig_node_slice("mig-0"))
    fake.add_resource_slice(fx.partitionable_slice("part-0"))
    with make_sync(fake) as sync:
        assert sync.wait_until_ready(10)
        assert gpus(sync) == {
            "dgx-0": (8, "H100-80GB", False),
            "mig-0": (2, "A100-80GB", True),
            "part-0": (2, "H100-80GB", False),
            "plugin-0": (4, "H100-80GB", False),
        }
        assert sync.dra_served is True
        devices = sync.node_devices()
        assert sorted(devices) == ["dgx-0", "mig-0", "part-0"]
        assert devices["dgx-0"].gpu(5).uuid == fx.gpu_uuid("dgx-0", 5)  # type: ignore[union-attr]
        assert len(sync.resource_slices()) == 3
        # The driver's slices reach the DRTG: identity on the GPU vertices, and the
        # PCIe roots (two GPUs per root) as the template's switches.
        topology = sync.topology()
        member = next(m for rack in topology.racks for m in rack.members if m.name == "dgx-0")
        assert [gpu.device for gpu in member.gpus] == [f"gpu-{i}" for i in range(8)]
        assert topology.node_templates[member.template].gpus_per_switch == 2


def test_slices_that_come_and_go_are_watched(fake: FakeApiServer) -> None:
    fake.add_node(dra_node("dgx-0"))
    with make_sync(fake) as sync:
        assert sync.wait_until_ready(10)
        assert gpus(sync) == {"dgx-0": (0, None, False)}
        created = fake.add_resource_slice(fx.dgx_h100_slice("dgx-0"))
        wait_until(lambda: gpus(sync)["dgx-0"] == (8, "H100-80GB", False), what="slice added")
        fewer = {**created, "spec": {**created["spec"], "devices": created["spec"]["devices"][:6]}}
        fake.replace(RESOURCE_SLICES, "", created["metadata"]["name"], fewer)
        wait_until(lambda: gpus(sync)["dgx-0"][0] == 6, what="slice shrunk")
        fake.delete(RESOURCE_SLICES, "", created["metadata"]["name"])
        wait_until(lambda: gpus(sync)["dgx-0"][0] == 0, what="slice deleted")


def test_pods_are_accounted_on_slice_gpus(fake: FakeApiServer) -> None:
    fake.add_node(dra_node("dgx-0"))
    fake.add_resource_slice(fx.dgx_h100_slice("dgx-0"))
    pod = v1_pod("trainer", containers=[v1_container(requests={"cpu": "4", "nvidia.com/gpu": "2"})])
    pod["spec"]["nodeName"] = "dgx-0"
    pod["status"]["phase"] = "Running"
    fake.add_pod(pod)
    with make_sync(fake) as sync:
        assert sync.wait_until_ready(10)
        with sync.locked() as (state, _):
            assert [int(x) for x in state.gpu_free_milli[0]] == [0, 0] + [1000] * 6
        assert sync.unaccounted == {}


def test_without_resource_k8s_io_the_extended_resources_stay(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="kubesage.core.k8s.optional_group")
    with FakeApiServer(dra=False) as fake:
        fake.add_node(v1_node("plugin-0", gpus=8))
        fake.add_node(v1_node("mig-0", gpus=2, mig={"3g.40gb": 4}))
        with make_sync(fake, resync_s=0.2) as sync:
            assert sync.wait_until_ready(10)
            assert gpus(sync) == {
                "mig-0": (2, "H100-80GB", True),
                "plugin-0": (8, "H100-80GB", False),
            }
            assert sync.dra_served is False
            assert sync.node_devices() == {}
            # The slice reflector idles instead of retrying: no failures, and the 404 is
            # logged once however often a resync probes again.
            wait_until(lambda: len(fake.requests_to("GET", r"resourceslices$")) >= 3, what="probes")
            assert sync.failures == 0
    notes = [
        r.getMessage() for r in caplog.records if "does not serve resource.k8s.io" in r.getMessage()
    ]
    # Once per reflector (slices, claims), each naming its fallback.
    assert len(notes) == len(set(notes)) == 2


def test_without_resource_k8s_io_a_pod_naming_a_claim_is_refused_not_left_waiting() -> None:
    """On a cluster that serves no resource.k8s.io/v1 (DRA through an older API) no claim
    will ever be seen: the pod's request is an error that says so, not a wait."""
    with FakeApiServer(dra=False) as fake:
        fake.add_node(v1_node("plugin-0", gpus=8))
        pod = v1_pod("p", namespace="default", scheduler_name="kubesage")
        pod["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": "mine"}]
        with make_sync(fake) as sync:
            assert sync.wait_until_ready(10)
            assert sync.dra_served is False
            served = r"does not serve resource\.k8s\.io/v1"
            with pytest.raises(TranslateError, match=served) as info:
                sync.request_of(pod)
            assert not isinstance(info.value, ClaimsPendingError)


def test_a_bad_slice_leaves_the_node_on_its_extended_resources(
    fake: FakeApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    fake.add_node(v1_node("plugin-0", gpus=4))
    bad = fx.dgx_h100_slice("plugin-0")
    bad["spec"]["devices"][3]["attributes"]["index"] = {"string": "three"}
    fake.add_resource_slice(bad)  # the API accepts it: one typed value is set
    with make_sync(fake) as sync:
        assert sync.wait_until_ready(10)
        assert gpus(sync) == {"plugin-0": (4, "H100-80GB", False)}
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("spec.devices.3.attributes.index: expected a non-negative int" in m for m in warned)


def test_slices_the_service_account_may_not_read_fall_back_with_a_warning(
    fake: FakeApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    fake.add_node(v1_node("plugin-0", gpus=4))
    fake.add_resource_slice(fx.dgx_h100_slice("plugin-0"))
    fake.fail("GET", r"resourceslices$", 403, times=1_000, message="forbidden")
    with make_sync(fake) as sync:
        assert sync.wait_until_ready(10)
        assert gpus(sync) == {"plugin-0": (4, "H100-80GB", False)}
        assert sync.failures == 0
    assert any("grant them to the service account" in r.getMessage() for r in caplog.records)


def test_a_static_mig_layout_takes_mig_pods_only_at_its_published_instances(
    fake: FakeApiServer,
) -> None:
    fake.add_node(dra_node("mig-0"))
    fake.add_resource_slice(fx.mig_node_slice("mig-0"))
    with make_sync(fake) as sync:
        assert sync.wait_until_ready(10)
        with sync.locked() as (state, _):
            layout = {
                (g, p, s) for g, instances in fx.MIG_NODE_LAYOUT.items() for p, s in instances
            }
            assert set(state.nodes[0].mig_instances or ()) == layout
            for profile in ("1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb"):
                shape = mig_shape(profile)
                slots = state.mig_slots(shape)[0]
                free = {(g, shape.starts[i]) for g, i in zip(*np.nonzero(slots), strict=True)}
                assert free == {(g, s) for g, p, s in layout if p == profile}, profile
            # Every slot of a dynamic MIG GPU would fit a 1g.10gb at slice 0; not here.
            one = mig_shape("1g.10gb")
            request = PodRequest(
                name="p", cpu_milli=100, memory_mib=64, num_gpu=1, gpu_milli=one.gpu_milli, mig=one
            )
            copy = state.copy()
            with pytest.raises(CapacityError, match=r"no 1g\.10gb instance at slice 0"):
                copy.allocate(request, copy.placement(0, (0,), request, mig_start=0))
            copy.allocate(request, copy.placement(0, (0,), request, mig_start=6))
