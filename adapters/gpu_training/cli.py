"""``kubesage gpu …``: plan and launch GPU training jobs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
import yaml
from rich.text import Text

from kubesage.adapters.gpu_training.allreduce import place_gang
from kubesage.adapters.gpu_training.launcher import (
    NodeShare,
    kubernetes_manifests,
    torchrun_commands,
)
from kubesage.adapters.gpu_training.live_gpus import live_free_gpus, live_mig_slots
from kubesage.adapters.gpu_training.mig import catalogue
from kubesage.core.arrays import BoolArray
from kubesage.core.cli.errors import refuse_unused_options, stderr, user_errors
from kubesage.core.cli.passthrough import PassThroughCommand
from kubesage.core.dra.claims import DeviceMode
from kubesage.core.errors import InputError
from kubesage.core.k8s.device_mode import detect_device_mode
from kubesage.core.loop.reconciler import Actuator, Reconciler
from kubesage.core.loop.settings import ReconcilerContext
from kubesage.core.perception import Collector
from kubesage.core.topology.examples import example_topology, topology_file
from kubesage.core.topology.graph import DRTG

gpu_app = typer.Typer(help="GPU training: placement-aware launches.", no_args_is_help=True)

DEFAULT_TOPOLOGY = "dgx-h100-pod"
"""The shipped example topology a launch places on when no --topology is given."""

YAML_WIDTH = 10_000
TARGETS = ("kubernetes", "torchrun")
DEFAULT_IMAGE = "pytorch/pytorch"


@gpu_app.command("launch", cls=PassThroughCommand)
@user_errors
def launch(
    ctx: typer.Context,
    gpus: Annotated[int, typer.Option("--gpus", min=1, help="GPUs for the job.")],
    mig: Annotated[str | None, typer.Option("--mig", help="A MIG profile, e.g. 3g.40gb.")] = None,
    image: Annotated[
        str | None, typer.Option("--image", help=f"Container image (default: {DEFAULT_IMAGE}).")
    ] = None,
    name: Annotated[
        str | None, typer.Option("--name", help="Job name, a DNS label (default: train).")
    ] = None,
    namespace: Annotated[
        str | None,
        typer.Option(
            "--namespace", "-n", help="Namespace of the Jobs and the Service (default: default)."
        ),
    ] = None,
    topology: Annotated[
        Path | None,
        typer.Option(
            "--topology",
            help="Topology YAML or a shipped example's name (default: dgx-h100-pod).",
        ),
    ] = None,
    target: Annotated[str, typer.Option("--target", help="kubernetes or torchrun.")] = "kubernetes",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan and why.")] = False,
    devices: Annotated[
        DeviceMode | None,
        typer.Option(
            "--devices",
            help="How the Jobs ask for GPUs: dra (ResourceClaimTemplates selecting the chosen "
            "GPUs) or device-plugin (nvidia.com/gpu limits). Default: asked of the --kubeconfig "
            "cluster (DRA if it serves resource.k8s.io/v1), else device-plugin.",
        ),
    ] = None,
    kubeconfig: Annotated[
        Path | None,
        typer.Option(
            "--kubeconfig",
            help="kubeconfig of the cluster: the plan takes only its free GPUs, and "
            "--devices is asked of it.",
        ),
    ] = None,
    context: Annotated[
        str | None, typer.Option("--context", help="kubeconfig context (default: current).")
    ] = None,
) -> None:
    """Place the job for the fastest AllReduce ring and print manifests or torchrun lines.

    Options come before --; everything after it is the training command.
    """
    command = list(ctx.args)
    if not command:
        raise InputError("give the training command after --, e.g. -- python train.py")
    if target not in TARGETS:
        raise InputError(f"--target must be {' or '.join(TARGETS)}, got '{target}'")
    if target == "torchrun":
        refuse_unused_options(
            {
                "--image": image is not None,
                "--name": name is not None,
                "--namespace": namespace is not None,
                "--devices": devices is not None,
                "--kubeconfig": kubeconfig is not None,
                "--context": context is not None,
            },
            "to --target kubernetes",
            "--target torchrun prints command lines, not manifests",
        )
    if topology is None:
        consequence = (
            "its lines name hosts you may not have"
            if target == "torchrun"
            else "its Jobs would stay Pending"
        )
        stderr.print(
            Text(
                f"warning: no --topology: the plan is on the shipped example "
                f"'{DEFAULT_TOPOLOGY}', whose node names are not your cluster's ({consequence}). "
                "`kubesage topology discover` writes your cluster's."
            )
        )
    topology = topology_file(topology) if topology else example_topology(DEFAULT_TOPOLOGY)
    drtg = DRTG.from_yaml(topology)
    free = np.ones(drtg.num_gpus, dtype=bool)  # no live occupancy without a cluster
    where = f"{topology.name} ({drtg.num_gpus} GPUs)"
    if mig is not None:
        if gpus != 1:
            raise InputError("a MIG job runs on one MIG slice: use --gpus 1 with --mig")
        if target == "torchrun":
            # A torchrun line selects GPUs by index (CUDA_VISIBLE_DEVICES): it cannot name
            # a MIG instance, whose UUID exists only once MIG Manager has made it.
            raise InputError(
                "--mig needs --target kubernetes (the device plugin hands the pod its MIG "
                "instance); --target torchrun selects whole GPUs only"
            )
        free &= _has_profile(drtg, mig, topology.name)
    if kubeconfig is not None:  # after the checks above: a user error costs no listing
        free &= _live_free(drtg, kubeconfig, context, mig)
        what = "free" if mig is None else f"able to start a {mig} instance"
        where = f"{topology.name}'s GPUs {what} on the cluster ({int(free.sum())})"
    placement = place_gang(drtg, free, gpus)
    if placement is None:
        raise InputError(f"{gpus} GPUs do not fit in {where}")
    shares = _node_shares(drtg, placement.ranks)
    if dry_run:
        stderr.print(f"plan: {placement.explanation}")
        for rank, share in enumerate(shares):
            stderr.print(f"  node rank {rank}: {share.node}, GPUs {list(share.gpu_indices)}")
    if target == "torchrun":
        master = shares[0].node
        for line in torchrun_commands(shares, command, master_addr=master):
            typer.echo(line)
        return
    mode, why = detect_device_mode(devices, kubeconfig, context)
    if dry_run:
        stderr.print(f"devices: {mode.value} ({why})", highlight=False)
    manifests = kubernetes_manifests(
        "train" if name is None else name,
        shares,
        command,
        image=DEFAULT_IMAGE if image is None else image,
        namespace="default" if namespace is None else namespace,
        mig_profile=mig,
        devices=mode,
    )
    # Wide lines: a CEL selector stays on one line instead of folding mid-expression.
    typer.echo(yaml.safe_dump_all(manifests, sort_keys=False, width=YAML_WIDTH).rstrip())


def _live_free(drtg: DRTG, kubeconfig: Path, context: str | None, mig: str | None) -> BoolArray:
    """The GPUs free on the ``kubeconfig`` cluster now — with ``mig``, those that can start
    an instance of that profile (:mod:`live_gpus`) — saying what was found on stderr."""
    from kubesage.core.k8s.apiclient import load_api_client

    api = load_api_client(str(kubeconfig), context)
    if api is None:  # an explicit kubeconfig loads or raises: not reached
        raise InputError(f"--kubeconfig {kubeconfig} configures no cluster")
    try:
        free, notes = live_free_gpus(drtg, api) if mig is None else live_mig_slots(drtg, api, mig)
    finally:
        api.close()  # type: ignore[no-untyped-call]
    for note in notes:
        stderr.print(note, highlight=False)
    return free


def _has_profile(drtg: DRTG, profile: str, where: str) -> BoolArray:
    """Per GPU, whether its node's GPU model has MIG ``profile``; InputError when none has."""
    why: dict[str, str] = {}
    capable = np.zeros(drtg.num_gpus, dtype=bool)
    for node in range(drtg.num_nodes):
        model = drtg.spec.node_templates[drtg.node_template[node]].gpu_model or "unknown"
        if model not in why:
            try:
                catalogue(model).profile(profile)
                why[model] = ""
            except InputError as exc:
                why[model] = str(exc)
        capable[drtg.node_gpus(node)] = not why[model]
    if not capable.any():
        raise InputError(
            f"no node in {where} has a GPU model with MIG profile '{profile}': "
            + "; ".join(why.values())
        )
    return capable


def _node_shares(drtg: DRTG, ranks: Sequence[int]) -> list[NodeShare]:
    """The placement's GPUs grouped by node in ring order, with their UUIDs when the
    topology knows every one of them (discovered from ResourceSlices), so a DRA claim
    selects them by UUID rather than by index."""
    shares: list[NodeShare] = []
    for gpu in ranks:
        node = drtg.node_names[int(drtg.gpu_node[gpu])]
        local = int(drtg.gpu_local[gpu])
        identity = drtg.gpu_identity[gpu]
        uuid = (identity.uuid or "") if identity is not None else ""
        if shares and shares[-1].node == node:
            last = shares[-1]
            shares[-1] = NodeShare(
                node, last.gpus + 1, (*last.gpu_indices, local), (*last.gpu_uuids, uuid)
            )
        else:
            shares.append(NodeShare(node, 1, (local,), (uuid,)))
    # A UUID selector must name every chosen GPU: any unknown one falls back to indices.
    return [
        share if all(share.gpu_uuids) else NodeShare(share.node, share.gpus, share.gpu_indices)
        for share in shares
    ]


@dataclass(frozen=True)
class GpuTrainingAdapter:
    name: str = "gpu"
    cli: typer.Typer = gpu_app

    def reconcilers(self, context: ReconcilerContext) -> Sequence[Reconciler]:
        """``gpu-defrag``, ``gpu-elastic`` and ``gpu-gang`` (docs/gpu-training.md)."""
        # Imported on use: the CLI starts without the loop's planners.
        from kubesage.adapters.gpu_training.reconcilers import reconcilers_for

        return reconcilers_for(context)

    def collectors(self, context: ReconcilerContext) -> Sequence[Collector[Any]]:
        """This node's GPUs through NVML, where a GPU is present (else none)."""
        from kubesage.adapters.gpu_training.nvml_samples import node_gpu_collectors

        return node_gpu_collectors()

    def actuators(self, context: ReconcilerContext) -> Sequence[Actuator]:
        """None: the core executes its actions (bind, evict, scale, patch, label)."""
        return ()


ADAPTER = GpuTrainingAdapter()
