"""The scenario's cluster: N DGX-class nodes in racks and zones, as a DRTG.

``kubesage simulate --scenario mixed --gpu-nodes N`` runs on N nodes of one node
template of the shipped example topologies (``dgx-h100`` from ``dgx-h100-pod``,
``dgx-h200`` from ``dgx-h200-oversubscribed``): 8 GPUs on an NVSwitch fabric, one
400 Gb/s NIC per pair of GPUs. Nodes fill racks of ``nodes_per_rack``, racks fill
zones of ``racks_per_zone``; the last rack and the last zone may be partly filled.

Uplinks keep the example's oversubscription rather than its absolute figures, so a
rack of 8 nodes is as oversubscribed as the example's rack of 4: a rack's uplink is
the example's rack uplink per node times the nodes in the rack, a zone's is the
example's zone uplink per rack times the racks in the zone. With the defaults (4
nodes a rack, 2 racks a zone) the figures are the example's own: for ``dgx-h100``
3.2 Tb/s a rack (2:1 against its NICs' 6.4 Tb/s) and 1.6 Tb/s a zone; for
``dgx-h200`` 1.6 Tb/s a rack (4:1) and 3.2 Tb/s a zone.

Names sort in rack order: zones ``zone-00``, racks ``rack-00``, nodes
``rack-00-node-00`` (zero-padded to the widest index), so a name sort of the nodes
is the DRTG's node order. The scenario's ``ClusterState`` is
``ClusterState(drtg.node_specs())``.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubesage.core.config import load_config
from kubesage.core.errors import InputError
from kubesage.core.topology.examples import example_topology
from kubesage.core.topology.graph import DRTG
from kubesage.core.topology.spec import (
    TOPOLOGY_KIND,
    NodeTemplate,
    RackSpec,
    TopologySpec,
    ZoneSpec,
)

TEMPLATE_EXAMPLES = {"dgx-h100": "dgx-h100-pod", "dgx-h200": "dgx-h200-oversubscribed"}
"""The node templates the scenario offers, by the shipped example that defines each."""
MAX_GPU_NODES = 4096
"""The largest cluster ``scenario_topology`` builds (32 768 GPUs): the DRTG and the
simulator hold per-GPU arrays, and a bigger question belongs on a real cluster."""


@dataclass(frozen=True)
class TemplateFigures:
    """A node template and the uplink figures of the example that ships it."""

    template: NodeTemplate
    rack_uplink_gbps_per_node: float
    """The example's rack uplink (Gb/s) divided by the nodes of that rack."""
    zone_uplink_gbps_per_rack: float
    """The example's zone uplink (Gb/s) divided by the racks of that zone."""
    example: str


def template_figures(template: str) -> TemplateFigures:
    """Read ``template`` and its rack and zone uplinks from its shipped example.

    Raises InputError for a template the scenario does not offer.
    """
    if template not in TEMPLATE_EXAMPLES:
        raise InputError(
            f"unknown node template '{template}'; known: {', '.join(TEMPLATE_EXAMPLES)}"
        )
    example = TEMPLATE_EXAMPLES[template]
    spec = load_config(example_topology(example), TopologySpec, kind=TOPOLOGY_KIND)
    rack = next(r for r in spec.racks if r.template == template)
    zone = next(z for z in spec.zones if z.name == rack.zone)
    racks_in_zone = sum(1 for r in spec.racks if r.zone == zone.name)
    return TemplateFigures(
        template=spec.node_templates[template],
        rack_uplink_gbps_per_node=rack.uplink_gbps / len(rack.node_entries()),
        zone_uplink_gbps_per_rack=zone.uplink_gbps / racks_in_zone,
        example=example,
    )


def _positive_count(name: str, value: int, maximum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= maximum:
        raise InputError(f"{name} must be a whole number from 1 to {maximum}, got {value!r}")


def scenario_topology_spec(
    gpu_nodes: int,
    *,
    template: str = "dgx-h100",
    nodes_per_rack: int = 4,
    racks_per_zone: int = 2,
) -> TopologySpec:
    """The Topology spec of :func:`scenario_topology` (see the module docstring)."""
    _positive_count("gpu_nodes", gpu_nodes, MAX_GPU_NODES)
    _positive_count("nodes_per_rack", nodes_per_rack, MAX_GPU_NODES)
    _positive_count("racks_per_zone", racks_per_zone, MAX_GPU_NODES)
    figures = template_figures(template)
    rack_sizes = [nodes_per_rack] * (gpu_nodes // nodes_per_rack)
    if gpu_nodes % nodes_per_rack:
        rack_sizes.append(gpu_nodes % nodes_per_rack)
    zone_count = -(-len(rack_sizes) // racks_per_zone)
    rack_width = max(2, len(str(len(rack_sizes) - 1)))
    zone_width = max(2, len(str(zone_count - 1)))
    # RackSpec pads node indices per rack; names still sort in rack order because every
    # rack name has the same width and a rack's nodes share its prefix.
    racks = [
        RackSpec(
            name=f"rack-{r:0{rack_width}d}",
            zone=f"zone-{r // racks_per_zone:0{zone_width}d}",
            uplink_gbps=figures.rack_uplink_gbps_per_node * size,
            template=template,
            nodes=size,
        )
        for r, size in enumerate(rack_sizes)
    ]
    zones = []
    for z in range(zone_count):
        racks_here = len(racks[z * racks_per_zone : (z + 1) * racks_per_zone])
        zones.append(
            ZoneSpec(
                name=f"zone-{z:0{zone_width}d}",
                uplink_gbps=figures.zone_uplink_gbps_per_rack * racks_here,
            )
        )
    return TopologySpec(node_templates={template: figures.template}, zones=zones, racks=racks)


def scenario_topology(
    gpu_nodes: int,
    *,
    template: str = "dgx-h100",
    nodes_per_rack: int = 4,
    racks_per_zone: int = 2,
) -> DRTG:
    """The scenario's cluster: ``gpu_nodes`` nodes of ``template`` in racks and zones.

    Raises InputError for a size that is not a whole number from 1 to
    :data:`MAX_GPU_NODES`, or an unknown template.
    """
    return DRTG(
        scenario_topology_spec(
            gpu_nodes,
            template=template,
            nodes_per_rack=nodes_per_rack,
            racks_per_zone=racks_per_zone,
        )
    )
