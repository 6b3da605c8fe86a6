"""A DRTG topology from a live cluster's Node objects and their labels.

Input: Node objects as mappings, either ``kubectl get nodes -o json``'s ``items``
or the kubernetes client's ``V1Node.to_dict()`` (both keep ``metadata.name``,
``metadata.labels`` and ``status.capacity`` as used here).

- Zone: the well-known label ``topology.kubernetes.io/zone`` (``default`` when
  absent).
- Rack: a label named by ``rack_label`` (default ``kubesage.io/rack``; providers
  use their own, e.g. a block or network-layer label). A node without it gets a
  rack of its own (``<node>-rack``): no locality is assumed that the labels do not
  show. Rack names are distinct: a label value reused in several zones names
  ``<zone>/<value>``, and a name already taken gets ``#2``, ``#3``... (label values
  first, so a labelled rack keeps its value and an unlabelled node never joins it).
- Node template: the label ``kubesage.io/node-template`` naming one of the
  ``templates`` given (e.g. from a Topology YAML, or built from NVML on the node);
  otherwise one derived from the GPU Feature Discovery labels
  (``nvidia.com/gpu.product``, ``nvidia.com/gpu.count``, else the
  ``nvidia.com/gpu`` capacity) and the CPU and memory capacity. Labels say
  nothing about NVLink, so a derived template is PCIe-only: conservative, never
  promising bandwidth the node may lack. A derived name never reuses the name of a
  ``templates`` entry with another layout. A template is not derived for a node
  under GFD's MIG ``single`` strategy (its product label names a MIG device,
  ``…-MIG-1g.5gb``): its count is of MIG devices, and the labels do not say how many
  GPUs hold them, so such a node needs the template label or ResourceSlices. The
  ``nvidia.com/mig.strategy`` label alone is no sign: GFD sets it on every node it
  labels, and a node whose GPUs are not in MIG mode reports them whole.
- Uplinks: ``rack_uplink_gbps`` and ``zone_uplink_gbps`` (defaults are
  placeholders; set them to the fabric's real capacity).
- Devices: for a node that publishes GPUs through Dynamic Resource Allocation
  (``devices``, read from its ResourceSlices by :mod:`kubesage.core.dra.nodes`), the
  slices win over the labels: the GPU count and model come from them, GPUs that share
  a ``resource.kubernetes.io/pcieRoot`` share a PCIe switch in the derived template
  (when the roots group the GPUs evenly, in index order), and each GPU's identity
  (DRA device name, UUID, PCIe root) is kept on the node's rack entry
  (:class:`~kubesage.core.topology.spec.GpuIdentity`). GPU indices with a gap are
  refused. :func:`split_kubectl_list` separates the Nodes and ResourceSlices of
  ``kubectl get nodes,resourceslices -o json``.
- Errors: InputError naming the node and the field (``metadata.labels.…``,
  ``status.capacity.…``) for a node that cannot be read or described.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from kubesage.core.config import API_VERSION
from kubesage.core.dra.nodes import NodeDevices
from kubesage.core.dra.slices import is_resource_slice
from kubesage.core.errors import InputError
from kubesage.core.field_errors import first_problem
from kubesage.core.topology.spec import (
    MAX_TEMPLATE_GPUS,
    TOPOLOGY_KIND,
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
# - The export parts share their catalogue with the part NVIDIA's default mig-parted
#   config groups them with: H800 (80 GB) and H800 NVL with H100-80GB and H100 NVL,
#   A800 with the A100 of its size, and H20 (96 GB) with H100-96GB. An H20 of another
#   size keeps its own string.
_PRODUCTS = (
    (re.compile(r"GH200.*144G", re.IGNORECASE), "GH200-144GB"),
    (re.compile(r"GH200", re.IGNORECASE), "H100-96GB"),
    (re.compile(r"(?<![A-Z])H200", re.IGNORECASE), "H200-141GB"),
    (re.compile(r"H100.*80GB|H100[- ]PCIE$", re.IGNORECASE), "H100-80GB"),
    (re.compile(r"H[18]00.*94GB|H[18]00[- ]NVL", re.IGNORECASE), "H100-94GB"),
    (re.compile(r"H100.*96GB", re.IGNORECASE), "H100-96GB"),
    (re.compile(r"H800(?!.*(?:94|96)GB)", re.IGNORECASE), "H100-80GB"),
    (re.compile(r"(?<![A-Z0-9])H20(?![0-9])(?!.*(?:1[0-9]{2})GB)", re.IGNORECASE), "H100-96GB"),
    (re.compile(r"A[18]00.*80GB", re.IGNORECASE), "A100-80GB"),
    (re.compile(r"A[18]00.*40GB|A100-SXM4$|A100-PCIE$", re.IGNORECASE), "A100-40GB"),
    (re.compile(r"(?<![A-Z0-9])A30(?![0-9])", re.IGNORECASE), "A30-24GB"),
)

_MIG_SINGLE_PRODUCT = re.compile(r"-MIG-", re.IGNORECASE)
"""A GFD product label naming a MIG device (``NVIDIA-A100-SXM4-40GB-MIG-1g.5gb``): the
node's GPUs are counted as MIG devices (MIG strategy ``single``)."""

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


def names_mig_device(product: str) -> bool:
    """Whether a GFD product label names a MIG device (``…-MIG-1g.5gb``), as under the
    MIG ``single`` strategy, where the node's GPU count and ``nvidia.com/gpu`` count
    MIG devices, not GPUs."""
    return _MIG_SINGLE_PRODUCT.search(product) is not None


def mig_device_refusal(product: str) -> str:
    """Why a node whose product label names a MIG device cannot be read from its labels."""
    return (
        f"'{product}' is a MIG device (GPU Feature Discovery's MIG 'single' strategy), so "
        f"{GPU_COUNT_LABEL} and the {GPU_RESOURCE} capacity count MIG devices, not GPUs"
    )


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


def _gpu_count(text: str, field: str, where: str) -> int:
    """A GPU count (``field`` names where it was read) within what a template holds."""
    try:
        gpus = int(text)
    except ValueError:
        raise InputError(f"{where}: {field}: GPU count '{text}' is not an integer") from None
    if not 0 <= gpus <= MAX_TEMPLATE_GPUS:
        raise InputError(
            f"{where}: {field}: GPU count {gpus} is outside 0..{MAX_TEMPLATE_GPUS}, the GPUs "
            "one node template holds"
        )
    return gpus


def derived_template(
    labels: Mapping[str, str],
    capacity: Mapping[str, str],
    where: str,
    devices: NodeDevices | None = None,
) -> NodeTemplate:
    """A PCIe-only template from GFD labels and capacity, or from the node's
    ResourceSlices when it publishes GPUs (see the module docstring)."""
    product = labels.get(GPU_PRODUCT_LABEL)
    width = None
    if devices is not None and devices.gpu_count:
        gpus = _gpu_count(str(devices.gpu_count), "ResourceSlices", where)
        product = devices.product or product
        width = _switch_width(devices.pcie_roots())
    else:
        if product is not None and names_mig_device(product):
            raise InputError(
                f"{where}: metadata.labels.{GPU_PRODUCT_LABEL}: {mig_device_refusal(product)}; "
                f"give the node's DRA ResourceSlices, or label it with {TEMPLATE_LABEL} naming "
                "a --templates template"
            )
        if GPU_COUNT_LABEL in labels:
            field, count_text = f"metadata.labels.{GPU_COUNT_LABEL}", labels[GPU_COUNT_LABEL]
        else:
            field, count_text = f"status.capacity.{GPU_RESOURCE}", capacity.get(GPU_RESOURCE, "0")
        gpus = _gpu_count(count_text, field, where)
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
    try:
        return NodeTemplate(
            gpu_model=gpu_model_from_product(product) if product else None,
            gpus=gpus,
            sockets=sockets,
            gpus_per_switch=width,
            cpu_milli=cpu_milli(capacity.get("cpu", "0"), where),
            memory_mib=memory_mib(capacity.get("memory", "0"), where),
        )
    except ValidationError as exc:
        raise InputError(f"{where}: derived node template: {first_problem(exc)}") from None


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


@dataclass(frozen=True)
class _NodeFacts:
    """What discovery reads of one Node object, type-checked."""

    name: str
    labels: Mapping[str, str]
    capacity: Mapping[str, str]


def _mapping(value: object, where: str, field: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InputError(f"{where}: {field}: expected a mapping, got {type(value).__name__}")
    return value


def _node_facts(node: object, position: int) -> _NodeFacts:
    """The name, labels and capacity of ``node`` (InputError naming the node and field
    where one is not of the Node's shape; quantities given as numbers are read as text)."""
    obj = _mapping(node, f"node #{position}", "node")
    metadata = _mapping(obj.get("metadata"), f"node #{position}", "metadata")
    name = metadata.get("name")
    if not name:
        raise InputError(f"node #{position}: metadata.name is missing")
    if not isinstance(name, str):
        raise InputError(
            f"node #{position}: metadata.name: expected a string, got {type(name).__name__}"
        )
    where = f"node '{name}'"
    labels = _mapping(metadata.get("labels"), where, "metadata.labels")
    for key, value in labels.items():
        if not isinstance(value, str):
            raise InputError(
                f"{where}: metadata.labels.{key}: expected a string, got {type(value).__name__}"
            )
    status = _mapping(obj.get("status"), where, "status")
    capacity: dict[str, str] = {}
    for key, quantity in _mapping(status.get("capacity"), where, "status.capacity").items():
        if isinstance(quantity, bool) or not isinstance(quantity, str | int | float):
            raise InputError(
                f"{where}: status.capacity.{key}: expected a quantity, got "
                f"{type(quantity).__name__}"
            )
        capacity[str(key)] = str(quantity)
    return _NodeFacts(name=name, labels={str(k): v for k, v in labels.items()}, capacity=capacity)


def _check_indices(devices: NodeDevices, where: str) -> None:
    """Refuse GPU indices with gaps: the DRTG numbers a node's GPUs ``0 .. N-1``."""
    indices = devices.gpu_indices
    if indices and indices != tuple(range(len(indices))):
        missing = sorted(set(range(max(indices) + 1)) - set(indices))
        raise InputError(
            f"{where}: its ResourceSlices publish GPU indices "
            f"{', '.join(map(str, indices))} but not {', '.join(map(str, missing))}; "
            "kubesage numbers a node's GPUs from 0 without gaps, and cannot place work on a "
            "GPU the driver does not publish (e.g. an unhealthy one): fix the driver's "
            "slices, or leave this node's slices out to describe it from its labels"
        )


def _derived_name(template: NodeTemplate, taken: Mapping[str, NodeTemplate]) -> str:
    """``auto-<model>-<gpus>g-<cores>c-<mem>gi``, with a suffix when ``taken`` holds that
    name for another layout (a template of ``--templates`` or one derived before)."""
    base = (
        f"auto-{template.gpu_model or 'cpu'}-{template.gpus}g-"
        f"{template.cpu_milli // 1000}c-{template.memory_mib // 1024}gi"
    ).lower()
    name, suffix = base, 2
    while taken.get(name, template) != template:  # same name, other layout
        name, suffix = f"{base}-{suffix}", suffix + 1
    return name


_RackKey = tuple[str, str | None, str]
"""(zone, rack label value or None, node name for a node without the label)."""


def _rack_names(keys: Sequence[_RackKey]) -> dict[_RackKey, str]:
    """One distinct name per rack: the label's value; ``<zone>/<value>`` for a value
    reused in several zones; ``<node>-rack`` for a node without the label. A name
    already taken gets ``#2``, ``#3``... (``#`` is not allowed in a label value); label
    values are served first, so a rack keeps its label's value whenever it can."""
    label_zones: dict[str, set[str]] = {}
    for zone, rack, _ in keys:
        if rack is not None:
            label_zones.setdefault(rack, set()).add(zone)

    def wanted(key: _RackKey) -> tuple[int, str]:
        zone, rack, node = key
        if rack is None:
            return 2, f"{node}-rack"
        return (0, rack) if len(label_zones[rack]) == 1 else (1, f"{zone}/{rack}")

    names: dict[_RackKey, str] = {}
    taken: set[str] = set()
    for key in sorted(keys, key=wanted):  # (priority, wanted name): distinct per rack
        want = wanted(key)[1]
        name, suffix = want, 2
        while name in taken:
            name, suffix = f"{want}#{suffix}", suffix + 1
        names[key] = name
        taken.add(name)
    return names


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
    publish through DRA, by node name. InputError naming the node and field for a node
    that cannot be read or described."""
    if not nodes:
        raise InputError("no nodes to build a topology from")
    known = dict(templates or {})
    used: dict[str, NodeTemplate] = {}
    racks: dict[_RackKey, list[RackMember]] = {}
    positions: dict[str, int] = {}
    for position, node in enumerate(nodes):
        facts = _node_facts(node, position)
        name, labels = facts.name, facts.labels
        where = f"node '{name}'"
        if name in positions:
            raise InputError(
                f"{where}: metadata.name: appears twice (nodes #{positions[name]} and #{position})"
            )
        positions[name] = position
        published = (devices or {}).get(name)
        if published is not None:
            _check_indices(published, where)
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
            template = derived_template(labels, facts.capacity, where, published)
            template_name = _derived_name(template, {**known, **used})
        used[template_name] = template
        zone = labels.get(ZONE_LABEL) or DEFAULT_ZONE
        rack = labels.get(rack_label) or None
        key = (zone, rack, "" if rack is not None else name)
        identities = gpu_identities(published) if published is not None else []
        racks.setdefault(key, []).append(
            RackMember(name=name, template=template_name, gpus=identities)
        )
    rack_names = _rack_names(list(racks))
    try:
        return TopologySpec(
            node_templates=used,
            zones=[
                ZoneSpec(name=zone, uplink_gbps=zone_uplink_gbps)
                for zone in sorted({zone for zone, _, _ in racks})
            ],
            racks=[
                RackSpec(
                    name=rack_names[key],
                    zone=key[0],
                    uplink_gbps=rack_uplink_gbps,
                    members=members,
                )
                for key, members in sorted(
                    racks.items(), key=lambda item: (item[0][0], rack_names[item[0]])
                )
            ],
        )
    except ValidationError as exc:
        raise InputError(f"discovered topology: {first_problem(exc)}") from None


def topology_document(spec: TopologySpec) -> dict[str, Any]:
    """``spec`` as a Topology config document, every field written out (defaults too:
    a reader sees each template's GPUs, sockets and switches without knowing them)."""
    return {
        "apiVersion": API_VERSION,
        "kind": TOPOLOGY_KIND,
        "spec": spec.model_dump(mode="json", exclude_none=True),
    }
