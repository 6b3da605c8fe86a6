"""The ``Topology`` config kind: node templates, racks and zones as YAML.

Example (``configs/topologies/dgx-h100-pod.yaml``)::

    apiVersion: kubesage.io/v1alpha1
    kind: Topology
    spec:
      node_templates:
        dgx-h100:
          gpu_model: H100-80GB
          gpus: 8
          sockets: 2
          gpus_per_switch: 2
          pcie_generation: 5
          nvlink: {topology: nvswitch, generation: 4, links_per_gpu: 18}
          nic_gbps_per_switch: 400
      zones:
        - {name: zone-a, uplink_gbps: 12800}
      racks:
        - {name: rack-1, zone: zone-a, uplink_gbps: 3200, template: dgx-h100, nodes: 4}

GPUs are spread evenly over the sockets and ``gpus_per_switch`` share each PCIe
switch, with one NIC per switch. ``nvlink.topology`` is ``nvswitch`` (every pair
at full NVLink bandwidth), ``pairs`` (GPU 2k and 2k+1 bridged) or ``none``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from kubesage.core.config import StrictModel

TOPOLOGY_KIND = "Topology"
MAX_TEMPLATE_GPUS = 64
"""The most GPUs one node template holds."""


class NvlinkSpec(StrictModel):
    topology: Literal["nvswitch", "pairs", "none"] = "none"
    generation: Literal[3, 4, 5] = 4
    links_per_gpu: int = Field(18, ge=1, le=36)
    """NVLinks per GPU (all to the NVSwitch fabric, or all to the bridged partner)."""


class NodeTemplate(StrictModel):
    gpu_model: str | None = None
    gpus: int = Field(8, ge=0, le=MAX_TEMPLATE_GPUS)
    sockets: int = Field(2, ge=1, le=8)
    gpus_per_switch: int = Field(2, ge=1, le=16)
    pcie_generation: Literal[3, 4, 5] = 4
    nvlink: NvlinkSpec = NvlinkSpec()
    nic_gbps_per_switch: float = Field(100.0, gt=0)
    cpu_milli: int = Field(96_000, ge=0)
    memory_mib: int = Field(786_432, ge=0)

    @model_validator(mode="after")
    def _layout(self) -> NodeTemplate:
        if self.gpus % self.sockets:
            raise ValueError(f"{self.gpus} GPUs do not spread evenly over {self.sockets} sockets")
        if (self.gpus // self.sockets) % self.gpus_per_switch:
            raise ValueError(
                f"{self.gpus // self.sockets} GPUs per socket do not fill switches of "
                f"{self.gpus_per_switch}"
            )
        if self.nvlink.topology == "pairs" and self.gpus % 2:
            raise ValueError("NVLink pairs need an even number of GPUs")
        if self.gpus and not self.gpu_model:
            raise ValueError("a template with GPUs needs gpu_model")
        return self


class ZoneSpec(StrictModel):
    name: str = Field(min_length=1)
    uplink_gbps: float = Field(gt=0)
    """Capacity between this zone and the others."""


class GpuIdentity(StrictModel):
    """Who one GPU of a named node is, as its DRA driver publishes it (ResourceSlices)."""

    index: int = Field(ge=0, le=MAX_TEMPLATE_GPUS - 1)
    """The GPU's local index: the DRTG vertex ``<node>/gpu<index>``."""
    device: str | None = None
    """The DRA device name an allocation names (``gpu-3``); None for a GPU in MIG mode,
    which publishes its MIG devices instead of itself."""
    uuid: str | None = None
    pcie_root: str | None = None
    """``resource.kubernetes.io/pcieRoot``."""


class RackMember(StrictModel):
    """One named node of a rack (racks discovered from a live cluster list them)."""

    name: str = Field(min_length=1)
    template: str
    gpus: list[GpuIdentity] = Field(default_factory=list)
    """Identity of the node's GPUs, when known (discovered from ResourceSlices)."""


class RackSpec(StrictModel):
    """A rack: ``nodes`` nodes of one ``template`` (named ``<rack>-node-NN``), or ``members``."""

    name: str = Field(min_length=1)
    zone: str
    uplink_gbps: float = Field(gt=0)
    """Capacity between this rack and the rest of its zone."""
    template: str | None = None
    nodes: int | None = Field(None, ge=1, le=100_000)
    members: list[RackMember] = Field(default_factory=list)

    @model_validator(mode="after")
    def _either_count_or_members(self) -> RackSpec:
        if self.members and (self.template is not None or self.nodes is not None):
            raise ValueError(f"rack '{self.name}': give members, or template and nodes, not both")
        if not self.members and (self.template is None or self.nodes is None):
            raise ValueError(f"rack '{self.name}' needs template and nodes (or members)")
        return self

    def node_entries(self) -> list[tuple[str, str]]:
        """``(node name, template)`` for every node of the rack."""
        if self.members:
            return [(member.name, member.template) for member in self.members]
        assert self.template is not None and self.nodes is not None
        width = max(2, len(str(self.nodes - 1)))
        return [(f"{self.name}-node-{i:0{width}d}", self.template) for i in range(self.nodes)]


class TopologySpec(StrictModel):
    node_templates: dict[str, NodeTemplate]
    zones: list[ZoneSpec]
    racks: list[RackSpec]

    @field_validator("racks")
    @classmethod
    def _some_racks(cls, racks: list[RackSpec]) -> list[RackSpec]:
        if not racks:
            raise ValueError("a topology needs at least one rack (and the zone it is in)")
        return racks

    @model_validator(mode="after")
    def _references(self) -> TopologySpec:
        zones = {zone.name for zone in self.zones}
        if len(zones) != len(self.zones):
            raise ValueError("zone names must be unique")
        racks = [rack.name for rack in self.racks]
        if len(set(racks)) != len(racks):
            raise ValueError("rack names must be unique")
        for rack in self.racks:
            if rack.zone not in zones:
                raise ValueError(f"rack '{rack.name}' names unknown zone '{rack.zone}'")
        names: set[str] = set()
        uuids: dict[str, str] = {}
        for rack in self.racks:
            for node, template in rack.node_entries():
                if template not in self.node_templates:
                    raise ValueError(f"rack '{rack.name}' names unknown template '{template}'")
                if node in names:
                    raise ValueError(f"node name '{node}' appears twice")
                names.add(node)
            for member in rack.members:
                indices = [gpu.index for gpu in member.gpus]
                gpus = self.node_templates[member.template].gpus
                if len(set(indices)) != len(indices) or any(i >= gpus for i in indices):
                    raise ValueError(
                        f"node '{member.name}': GPU identities {indices} are not distinct "
                        f"indices below its template's {gpus} GPUs"
                    )
                devices = [gpu.device for gpu in member.gpus if gpu.device is not None]
                if len(set(devices)) != len(devices):
                    raise ValueError(f"node '{member.name}': a device name appears twice")
                for gpu in member.gpus:
                    if gpu.uuid is None:
                        continue
                    if gpu.uuid in uuids:  # a claim selecting it could never be satisfied
                        raise ValueError(
                            f"GPU UUID '{gpu.uuid}' of node '{member.name}' GPU {gpu.index} is "
                            f"also {uuids[gpu.uuid]}'s: a UUID names one GPU"
                        )
                    uuids[gpu.uuid] = f"node '{member.name}' GPU {gpu.index}"
        return self
