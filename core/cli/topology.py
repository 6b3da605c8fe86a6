"""``kubesage topology …``: build a Topology from a live cluster's nodes (and the
ResourceSlices their GPU driver publishes), and summarise one."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated

import typer
import yaml

from kubesage.core.cli.errors import stderr, user_errors
from kubesage.core.config import load_config, read_config_text
from kubesage.core.dra.nodes import node_devices
from kubesage.core.errors import InputError
from kubesage.core.topology.discovery import (
    DEFAULT_RACK_LABEL,
    split_kubectl_list,
    topology_document,
    topology_from_nodes,
)
from kubesage.core.topology.examples import topology_file
from kubesage.core.topology.graph import DRTG
from kubesage.core.topology.spec import TOPOLOGY_KIND, TopologySpec

topology_app = typer.Typer(
    help="Cluster topology (DRTG): discover and inspect.", no_args_is_help=True
)


def _read_list(path: Path, what: str) -> list[object]:
    """The ``items`` of a kubectl List file (``-``: stdin)."""
    text = typer.get_text_stream("stdin").read() if str(path) == "-" else None
    try:
        document = json.loads(text if text is not None else read_config_text(path))
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not valid JSON: {exc}") from None
    items = document.get("items") if isinstance(document, dict) else None
    if not isinstance(items, list):
        raise InputError(f"{path}: expected a {what} with 'items' (kubectl -o json)")
    return items


@topology_app.command("discover")
@user_errors
def discover(
    nodes_json: Annotated[
        Path,
        typer.Argument(
            help="Output of 'kubectl get nodes -o json', or of 'kubectl get "
            "nodes,resourceslices -o json' ('-' for stdin)."
        ),
    ],
    resource_slices: Annotated[
        Path | None,
        typer.Option(
            "--resource-slices",
            help="Output of 'kubectl get resourceslices -o json': the GPUs nodes publish "
            "through DRA (they win over the node labels).",
        ),
    ] = None,
    templates: Annotated[
        Path | None,
        typer.Option(
            "--templates",
            help="A Topology YAML whose node_templates the kubesage.io/node-template label names.",
        ),
    ] = None,
    rack_label: Annotated[
        str, typer.Option("--rack-label", help="Node label naming the rack.")
    ] = DEFAULT_RACK_LABEL,
    rack_uplink_gbps: Annotated[float, typer.Option(help="Each rack's uplink.")] = 800.0,
    zone_uplink_gbps: Annotated[float, typer.Option(help="Each zone's uplink.")] = 3_200.0,
    output: Annotated[
        Path | None,
        typer.Option("--out", "--output", "-o", help="Write the YAML here (default: stdout)."),
    ] = None,
) -> None:
    """Write the Topology (zones, racks, node templates) that the nodes' labels describe.

    Where nodes publish GPUs through Dynamic Resource Allocation (ResourceSlices, in
    the same List or with --resource-slices), the slices give the GPU model, count,
    PCIe roots and each GPU's identity.
    """
    for option, gbps in (
        ("--rack-uplink-gbps", rack_uplink_gbps),
        ("--zone-uplink-gbps", zone_uplink_gbps),
    ):
        if not (gbps > 0 and math.isfinite(gbps)):
            raise InputError(f"{option} must be a positive number of Gbit/s, got {gbps}")
    items, slices = split_kubectl_list(_read_list(nodes_json, "NodeList"))
    if resource_slices is not None:
        more_nodes, more = split_kubectl_list(_read_list(resource_slices, "ResourceSliceList"))
        if more_nodes:
            raise InputError(f"{resource_slices}: expected ResourceSlices, found Nodes")
        slices += more
    devices = node_devices(slices)
    known = (
        load_config(templates, TopologySpec, kind=TOPOLOGY_KIND).node_templates if templates else {}
    )
    spec = topology_from_nodes(
        items,
        templates=known,
        rack_label=rack_label,
        rack_uplink_gbps=rack_uplink_gbps,
        zone_uplink_gbps=zone_uplink_gbps,
        devices=devices,
    )
    rendered = yaml.safe_dump(topology_document(spec), sort_keys=False)
    if output is None:
        typer.echo(rendered, nl=False)
    else:
        try:
            output.write_text(rendered, encoding="utf-8")
        except OSError as exc:
            raise InputError(f"--output {output}: cannot write: {exc.strerror}") from None
        published = f", {len(devices)} with ResourceSlices" if devices else ""
        stderr.print(
            f"{len(items)} node(s){published} in {len(spec.racks)} rack(s) written to {output}"
        )


@topology_app.command("show")
@user_errors
def show(
    path: Annotated[
        Path,
        typer.Argument(
            help="A Topology YAML file, or a shipped example's name (e.g. dgx-h100-pod)."
        ),
    ],
) -> None:
    """Summarise a Topology: zones, racks, nodes, GPUs and graph size.

    A name with no such file names an example shipped in the package (the files of
    configs/topologies; an unknown name lists them).
    """
    graph = DRTG.from_yaml(topology_file(path))
    typer.echo(
        f"{len(graph.zone_names)} zone(s), {len(graph.rack_names)} rack(s), "
        f"{graph.num_nodes} node(s), {graph.num_gpus} GPU(s), {graph.num_edges} edges"
    )
    for name, template in graph.spec.node_templates.items():
        count = graph.node_template.count(name)
        typer.echo(
            f"  {name}: {count} node(s) × {template.gpus} {template.gpu_model or 'no GPU'}, "
            f"NVLink {template.nvlink.topology}"
        )
