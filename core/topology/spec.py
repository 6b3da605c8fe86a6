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

from pydantic import Field, model_validator

from kubesage.core.config import StrictModel

TOPOLOGY_KIND = "Topology"


class NvlinkSpec(StrictModel):
    topology: Literal["nvswitch", "pairs", "none"] = "none"
    generation: Literal[3, 4, 5] = 4
    links_per_gpu: int = Field(18, ge=1, le=36)
    """NVLinks per GPU (all to the NVSwitch fabric, or all to the bridged partner)."""


class NodeTemplate(StrictModel):
    gpu_model: str | None = None
    gpus: int = Field(8, ge=0, le=64)
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


class RackSpec(StrictModel):
    name: str = Field(min_length=1)
    zone: str
    uplink_gbps: float = Field(gt=0)
    """Capacity between this rack and the rest of its zone."""
    template: str
    nodes: int = Field(ge=1, le=100_000)


class TopologySpec(StrictModel):
    node_templates: dict[str, NodeTemplate]
    zones: list[ZoneSpec]
    racks: list[RackSpec]

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
            if rack.template not in self.node_templates:
                raise ValueError(f"rack '{rack.name}' names unknown template '{rack.template}'")
        return self
