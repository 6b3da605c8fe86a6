"""The informer's ResourceSlices: the GPUs each node publishes through DRA.

:class:`SliceCache` keeps the ResourceSlice objects of NVIDIA's GPU driver
(``spec.driver=gpu.nvidia.com``, listed and watched by
:class:`~kubesage.core.k8s.informer.ClusterSync`) and the devices they publish per
node (:func:`~kubesage.core.dra.nodes.readable_node_devices`); :func:`with_devices`
lets those devices win over a node's labels and extended resources. A node whose
slices cannot be read keeps its extended-resource GPUs, with a warning per problem
(once per problem text). On a cluster without ``resource.k8s.io/v1`` the list call
(:class:`~kubesage.core.k8s.optional_group.OptionalListCall`) reads as empty, so every
node's GPUs come from ``nvidia.com/gpu`` and ``nvidia.com/mig-*`` as before.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError

from kubesage.core.dra import api as dra
from kubesage.core.dra.nodes import NodeDevices, readable_node_devices
from kubesage.core.field_errors import first_problem
from kubesage.core.k8s.apiclient import ApiClient, ResourceV1Api
from kubesage.core.k8s.optional_group import OptionalListCall
from kubesage.core.k8s.translate import UNKNOWN_GPU_MODEL, TranslateError
from kubesage.core.topology.discovery import gpu_model_from_product
from kubesage.core.types import NodeSpec

log = logging.getLogger(__name__)

Obj = dict[str, Any]


def with_devices(spec: NodeSpec, devices: NodeDevices) -> NodeSpec:
    """``spec`` with the GPUs its ResourceSlices publish: count, model, memory, MIG mode
    and, in MIG mode, the static instances (MIG requests go to those only); a node
    publishing no GPU keeps ``spec``. TranslateError past the limits."""
    if not devices.gpu_count:
        return spec
    product = devices.product
    try:
        return NodeSpec(
            **{
                **spec.model_dump(),
                "gpu_count": devices.gpu_count,
                "gpu_model": gpu_model_from_product(product) if product else UNKNOWN_GPU_MODEL,
                "gpu_memory_mib": devices.gpu_memory_mib or spec.gpu_memory_mib,
                "mig_enabled": devices.mig_enabled,
                "mig_instances": devices.mig_instances,
            }
        )
    except ValidationError as exc:
        raise TranslateError(
            str(first_problem(exc)), path=f"node '{spec.name}' (ResourceSlices)"
        ) from exc


class SliceCache:
    """ResourceSlices of one driver and the devices they publish per node.

    Not locked: its owner (ClusterSync) calls it under its own lock.
    """

    def __init__(self, api: ApiClient, driver: str = dra.NVIDIA_GPU_DRIVER) -> None:
        self.driver = driver
        resource: Any = ResourceV1Api(api)  # raw JSON calls (_preload_content=False)

        def list_slices(**kwargs: Any) -> Any:
            return resource.list_resource_slice(
                field_selector=f"{dra.SLICE_DRIVER_FIELD}={driver}", **kwargs
            )

        self.list_call = OptionalListCall(
            list_slices,
            dra.API_VERSION,
            "GPUs are read from the extended resources nvidia.com/gpu and nvidia.com/mig-*",
        )
        self._slices: dict[str, Obj] = {}
        self.devices: dict[str, NodeDevices] = {}
        """Devices per node name (nodes that publish none are absent)."""
        self._warned: set[str] = set()

    @property
    def served(self) -> bool | None:
        """Whether the cluster serves ``resource.k8s.io/v1`` (None: not listed yet)."""
        return self.list_call.served

    def slices(self) -> list[Obj]:
        """The ResourceSlice objects (treat as read-only)."""
        return list(self._slices.values())

    def replace(self, items: list[Obj]) -> set[str]:
        """A full list; returns the nodes whose devices changed."""
        self._slices = {str(item["metadata"]["name"]): item for item in items}
        return self._refresh()

    def apply(self, kind: str, obj: Obj) -> set[str]:
        """A watch event; returns the nodes whose devices changed."""
        name = str(obj["metadata"]["name"])
        if kind == "DELETED":
            self._slices.pop(name, None)
        else:
            self._slices[name] = obj
        return self._refresh()

    def _refresh(self) -> set[str]:
        devices, problems = readable_node_devices(self._slices.values(), self.driver)
        for problem in problems:
            if str(problem) not in self._warned:
                self._warned.add(str(problem))
                log.warning("ResourceSlice not read (GPUs from extended resources): %s", problem)
        changed = {
            node
            for node in set(devices) | set(self.devices)
            if devices.get(node) != self.devices.get(node)
        }
        self.devices = devices
        return changed

    def node_spec(self, spec: NodeSpec) -> NodeSpec:
        """``spec`` with the node's published GPUs, when it publishes any."""
        devices = self.devices.get(spec.name)
        return spec if devices is None else with_devices(spec, devices)
