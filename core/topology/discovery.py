"""A DRTG topology from a live cluster's Node objects and their labels.

Input: Node objects as mappings, either ``kubectl get nodes -o json``'s ``items``
or the kubernetes client's ``V1Node.to_dict()`` (both keep ``metadata.name``,
``metadata.labels`` and ``status.capacity`` as used here).

- Zone: the well-known label ``topology.kubernetes.io/zone`` (``default`` when
  absent).
- Rack: a label named by ``rack_label`` (default ``kubesage.io/rack``; providers
  use their own, e.g. a block or network-layer label). A node without it gets a
  rack of its own: no locality is assumed that the labels do not show.
- Node template: the label ``kubesage.io/node-template`` naming one of the
  ``templates`` given (e.g. from a Topology YAML, or built from NVML on the node);
  otherwise one derived from the GPU Feature Discovery labels
  (``nvidia.com/gpu.product``, ``nvidia.com/gpu.count``, else the
  ``nvidia.com/gpu`` capacity) and the CPU and memory capacity. Labels say
  nothing about NVLink, so a derived template is PCIe-only: conservative, never
  promising bandwidth the node may lack.
- Uplinks: ``rack_uplink_gbps`` and ``zone_uplink_gbps`` (defaults are
  placeholders; set them to the fabric's real capacity).
- Devices: for a node that publishes GPUs through Dynamic Resource Allocation
  (``devices``, read from its ResourceSlices by :mod:`kubesage.core.dra.nodes`), the
  slices win over the labels: the GPU count and model come from them, GPUs that share
  a ``resource.kubernetes.io/pcieRoot`` share a PCIe switch in the derived template
  (when the roots group the GPUs evenly, in index order), and each GPU's identity
  (DRA device name, UUID, PCIe root) is kept on the node's rack entry
  (:class:`~kubesage.core.topology.spec.GpuIdentity`). :func:`split_kubectl_list`
  separates the Nodes and ResourceSlices of ``kubectl get nodes,resourceslices -o json``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from kubesage.core.dra.nodes import NodeDevices
from kubesage.core.dra.slices import is_resource_slice
from kubesage.core.errors import InputError
from kubesage.core.topology.spec import (
    GpuIdentity,
    NodeTemplate,
    RackMember,
    RackSpec,
    TopologySpec,
    ZoneSpec,
)

ZONE_LABEL = "topology.kubernetes.io/zone"
DEFAULT_RACK_LABEL = "kubesage.io/rack"
TEMPLATE_LABEL = "kubesage.io/node-template"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
GPU_RESOURCE = "nvidia.com/gpu"
DEFAULT_ZONE = "default"

# GPU Feature Discovery product strings (``NVIDIA-H100-80GB-HBM3``) and NVML names
# (``NVIDIA H100 PCIe``) → the model names of the MIG catalogues (memory size as in
# the MIG User Guide's "Supported GPUs" table). First match wins; a product no
# pattern matches keeps its own string (and has no MIG catalogue).
# - GH200 480GB carries the "H100 on GH200" (96 GB); the GH200 144GB HBM3e part is
#   its own product, not an H200.
# - "H100 PCIe" with no size is the 80 GB PCIe card; H100 NVL is the 94 GB part.
_PRODUCTS = (
    (re.compile(r"GH200.*144G", re.IGNORECASE), "GH200-144GB"),
    (re.compile(r"GH200", re.IGNORECASE), "H100-96GB"),
    (re.compile(r"(?<![A-Z])H200", re.IGNORECASE), "H200-141GB"),
    (re.compile(r"H100.*80GB|H100[- ]PCIE$", re.IGNORECASE), "H100-80GB"),
    (re.compile(r"H100.*94GB|H100[- ]NVL", re.IGNORECASE), "H100-94GB"),
    (re.compile(r"H100.*96GB", re.IGNORECASE), "H100-96GB"),
    (re.compile(r"A100.*80GB", re.IGNORECASE), "A100-80GB"),
    (re.compile(r"A100.*40GB|A100-SXM4$|A100-PCIE$", re.IGNORECASE), "A100-40GB"),
    (re.compile(r"(?<![A-Z0-9])A30(?![0-9])", re.IGNORECASE), "A30-24GB"),
)

_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([a-zA-Z]*)$")
_MEMORY_UNITS = {
    "": 1 / 2**20,
    "k": 1e3 / 2**20,
    "M": 1e6 / 2**20,
    "G": 1e9 / 2**20,
    "T": 1e12 / 2**20,
    "Ki": 1 / 2**10,
    "Mi": 1.0,
    "Gi": 2**10,
    "Ti": 2**20,
}


def gpu_model_from_product(product: str) -> str:
    """The catalogue name for a GFD product string (the string itself if unknown)."""
    for pattern, model in _PRODUCTS:
        if pattern.search(product):
            return model
    return product


def cpu_milli(quantity: str, where: str) -> int:
    """A Kubernetes CPU quantity (``96``, ``95500m``) in milli-cores."""
    match = _QUANTITY.match(quantity.strip())
    if match is None or match.group(2) not in ("", "m"):
        raise InputError(f"{where}: cannot read CPU quantity '{quantity}'")
    value = float(match.group(1))
    return int(value if match.group(2) == "m" else value * 1000)


def memory_mib(quantity: str, where: str) -> int:
    """A Kubernetes memory quantity (``786432Ki``, ``768Gi``, ``8G``) in MiB."""
    match = _QUANTITY.match(quantity.strip())
    if match is None or match.group(2) not in _MEMORY_UNITS:
        raise InputError(f"{where}: cannot read memory quantity '{quantity}'")
    return int(float(match.group(1)) * _MEMORY_UNITS[match.group(2)])


def _switch_width(roots: Sequence[str | None]) -> int | None:
    """GPUs per PCIe switch when the roots group the GPUs evenly in index order
    (``a a b b c c``: 2); None when they do not say."""
    if not roots or any(root is None for root in roots):
        return None
    runs: list[tuple[str | None, int]] = []
    for root in roots:
        if runs and runs[-1][0] == root:
            runs[-1] = (root, runs[-1][1] + 1)
        else:
            runs.append((root, 1))
    sizes = {size for _, size in runs}
    if len(sizes) != 1 or len({root for root, _ in runs}) != len(runs):
        return None
    return sizes.pop()


def derived_template(
    labels: Mapping[str, str],
    capacity: Mapping[str, str],
    where: str,
    devices: NodeDevices | None = None,
) -> NodeTemplate:
    """A PCIe-only template from GFD labels and capacity, or from the node's
    ResourceSlices when it publishes GPUs (see the module docstring)."""
    count_text = labels.get(GPU_COUNT_LABEL, capacity.get(GPU_RESOURCE, "0"))
    product = labels.get(GPU_PRODUCT_LABEL)
    width = None
    if devices is not None and devices.gpu_count:
        count_text = str(devices.gpu_count)
        product = devices.product or product
        width = _switch_width(devices.pcie_roots())
    try:
        gpus = int(count_text)
    except ValueError:
        raise InputError(f"{where}: GPU count '{count_text}' is not an integer") from None
    if gpus and not product:
        raise InputError(
            f"{where}: has {gpus} GPUs but no {GPU_PRODUCT_LABEL} label; label the node "
            f"with {TEMPLATE_LABEL} or run GPU Feature Discovery"
        )
    sockets = 2 if gpus >= 2 and gpus % 2 == 0 else 1
    per_socket = gpus // sockets
    if width is not None and per_socket % width:
        sockets, per_socket = 1, gpus  # a switch spanning "sockets": do not split them
    if width is None or per_socket % width:
        width = 2 if per_socket and per_socket % 2 == 0 else 1
    return NodeTemplate(
        gpu_model=gpu_model_from_product(product) if product else None,
        gpus=gpus,
        sockets=sockets,
        gpus_per_switch=width,
        cpu_milli=cpu_milli(capacity.get("cpu", "0"), where),
        memory_mib=memory_mib(capacity.get("memory", "0"), where),
    )


def split_kubectl_list(items: Sequence[Any]) -> tuple[list[Mapping[str, Any]], list[Any]]:
    """The Nodes and the ResourceSlices of a kubectl List (items without a ``kind``, as
    in ``kubectl get nodes -o json``, are Nodes)."""
    nodes: list[Mapping[str, Any]] = []
    slices: list[Any] = []
    for item in items:
        if isinstance(item, Mapping) and is_resource_slice(item):
            slices.append(item)
        elif isinstance(item, Mapping) and item.get("kind", "Node") == "Node":
            nodes.append(item)
        else:
            kind = item.get("kind") if isinstance(item, Mapping) else type(item).__name__
            raise InputError(f"expected Nodes and ResourceSlices, got a {kind}")
    return nodes, slices


def gpu_identities(devices: NodeDevices) -> list[GpuIdentity]:
    """Each GPU's identity as the node's ResourceSlices publish it."""
    identities = []
    for index in devices.gpu_indices:
        gpu = devices.gpu(index)
        parent_uuid = next((m.parent_uuid for m in devices.migs if m.parent_index == index), None)
        identities.append(
            GpuIdentity(
                index=index,
                device=gpu.name if gpu else None,
                uuid=gpu.uuid if gpu else parent_uuid,
                pcie_root=gpu.pcie_root if gpu else None,
            )
        )
    return identities


def topology_from_nodes(
    nodes: Sequence[Mapping[str, Any]],
    *,
    templates: Mapping[str, NodeTemplate] | None = None,
    rack_label: str = DEFAULT_RACK_LABEL,
    rack_uplink_gbps: float = 800.0,
    zone_uplink_gbps: float = 3_200.0,
    devices: Mapping[str, NodeDevices] | None = None,
) -> TopologySpec:
    """The Topology of ``nodes`` (see the module docstring); ``devices``: what nodes
    publish through DRA, by node name."""
    if not nodes:
        raise InputError("no nodes to build a topology from")
    known = dict(templates or {})
    used: dict[str, NodeTemplate] = {}
    racks: dict[tuple[str, str], list[RackMember]] = {}
    for position, node in enumerate(nodes):
        metadata = node.get("metadata") or {}
        name = metadata.get("name")
        if not name:
            raise InputError(f"node #{position}: metadata.name is missing")
        where = f"node '{name}'"
        labels: Mapping[str, str] = metadata.get("labels") or {}
        capacity: Mapping[str, str] = (node.get("status") or {}).get("capacity") or {}
        published = (devices or {}).get(name)
        template_name = labels.get(TEMPLATE_LABEL)
        if template_name is not None:
            if template_name not in known:
                raise InputError(
                    f"{where}: label {TEMPLATE_LABEL}={template_name} names no known template "
                    f"(known: {', '.join(sorted(known)) or 'none'})"
                )
            template = known[template_name]
            if published is not None and published.gpu_count not in (0, template.gpus):
                raise InputError(
                    f"{where}: template {template_name} has {template.gpus} GPUs but the "
                    f"node's ResourceSlices publish {published.gpu_count}"
                )
        else:
            template = derived_template(labels, capacity, where, published)
            base = (
                f"auto-{template.gpu_model or 'cpu'}-{template.gpus}g-"
                f"{template.cpu_milli // 1000}c-{template.memory_mib // 1024}gi"
            ).lower()
            template_name, suffix = base, 2
            while used.get(template_name, template) != template:  # same name, other layout
                template_name, suffix = f"{base}-{suffix}", suffix + 1
        used[template_name] = template
        zone = labels.get(ZONE_LABEL, DEFAULT_ZONE)
        rack = labels.get(rack_label) or f"{name}-rack"
        identities = gpu_identities(published) if published is not None else []
        racks.setdefault((zone, rack), []).append(
            RackMember(name=name, template=template_name, gpus=identities)
        )
    zones = sorted({zone for zone, _ in racks})
    rack_zones: dict[str, set[str]] = {}
    for zone, rack in racks:
        rack_zones.setdefault(rack, set()).add(zone)
    return TopologySpec(
        node_templates=used,
        zones=[ZoneSpec(name=zone, uplink_gbps=zone_uplink_gbps) for zone in zones],
        racks=[
            RackSpec(
                # A rack label reused in two zones names two racks.
                name=rack if len(rack_zones[rack]) == 1 else f"{zone}/{rack}",
                zone=zone,
                uplink_gbps=rack_uplink_gbps,
                members=members,
            )
            for (zone, rack), members in sorted(racks.items())
        ],
    )
