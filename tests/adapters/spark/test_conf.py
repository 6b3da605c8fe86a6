"""Spark conf and pod templates for a placement."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from kubesage.adapters.spark.conf import (
    GROUP_LABEL,
    SparkSettings,
    executor_memory_mib,
    executor_pod_shape,
    spark_settings,
)
from kubesage.adapters.spark.job_hints import INPUT_LOCALITY_ANNOTATION
from kubesage.adapters.spark.placement import ExecutorShape, place_executors
from kubesage.adapters.spark.shuffle_model import ShuffleProfile
from kubesage.core.cli.main import app
from kubesage.core.dra.claims import DeviceMode
from kubesage.core.errors import InputError
from kubesage.core.k8s.validation import DRA_KUBERNETES_VERSION, validate_manifests
from kubesage.core.state.cluster_state import ClusterState
from kubesage.core.topology.discovery import topology_from_nodes
from kubesage.core.topology.examples import topology_file
from kubesage.core.topology.graph import DRTG
from tests.adapters.spark.test_placement import loaded, topology
from tests.core.k8s import v1_node

GB = 10**9


def members(drtg: DRTG, rack: str) -> list[str]:
    index = drtg.rack_names.index(rack)
    return [name for name, r in zip(drtg.node_names, drtg.node_rack, strict=True) if r == index]


def by_name(term: dict[str, Any]) -> str:
    """The one node a term matches (the API server takes one value per matchFields)."""
    (field,) = term["matchFields"]
    assert (field["key"], field["operator"]) == ("metadata.name", "In")
    (name,) = field["values"]
    return str(name)


def test_one_rack_is_required_by_its_nodes_names_and_templates_validate() -> None:
    drtg = topology()
    shape = ExecutorShape(8, 4, 8_192)
    placement = place_executors(drtg, loaded(drtg, {}), shape, ShuffleProfile((GB,)))
    settings = spark_settings(drtg, placement, shape, template_dir="/t", local_dir="/mnt/nvme")
    rack = next(iter(placement.executors_per_rack(drtg)))
    assert not any("node.selector" in key for key in settings.conf)  # the affinity says it
    assert settings.conf["spark.executor.instances"] == "8"
    assert settings.conf["spark.executor.memory"] == "8192m"
    assert settings.conf["spark.executor.memoryOverhead"] == "819m"
    assert settings.conf["spark.dynamicAllocation.shuffleTracking.enabled"] == "true"
    volume = "spark.kubernetes.executor.volumes.hostPath.spark-local-dir-1"
    assert settings.conf[f"{volume}.options.path"] == "/mnt/nvme"
    assert settings.conf["spark.kubernetes.executor.podTemplateFile"] == "/t/executor-template.yaml"
    validate_manifests([settings.executor_template, settings.driver_template])
    affinity = settings.executor_template["spec"]["affinity"]
    required = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert [by_name(term) for term in required["nodeSelectorTerms"]] == members(drtg, rack)
    group = settings.executor_template["metadata"]["labels"][GROUP_LABEL]
    term = affinity["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == {GROUP_LABEL: group}
    assert " --conf spark.locality.wait.rack=0s" in " " + " ".join(settings.submit_args())
    assert "spark.executor.cores 4\n" in settings.properties()


def test_several_racks_get_weighted_preferences_and_no_selector() -> None:
    drtg = topology()
    state = loaded(drtg, dict.fromkeys(range(drtg.num_nodes), 16))
    shape = ExecutorShape(12, 8, 8_192)
    placement = place_executors(drtg, state, shape, ShuffleProfile((GB,)), max_node_share=1.0)
    settings = spark_settings(drtg, placement, shape, template_dir="/t", rack_label="rack")
    assert not any("node.selector" in key for key in settings.conf)
    preferred = settings.executor_template["spec"]["affinity"]["nodeAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    weights = {by_name(p["preference"]): p["weight"] for p in preferred}
    assert len(weights) == len(preferred)  # one preference per node
    assert weights == dict.fromkeys(members(drtg, "za-r0"), 67) | dict.fromkeys(
        members(drtg, "za-r1"), 33
    )
    driver = settings.driver_template["spec"]["affinity"]["nodeAffinity"]
    by_node = [
        (by_name(p["preference"]), p["weight"])
        for p in driver["preferredDuringSchedulingIgnoredDuringExecution"]
        if "matchFields" in p["preference"]
    ]
    assert by_node == [(name, 100) for name in members(drtg, "za-r0")]
    assert np.isfinite(placement.estimate.cross_rack_bytes)


def gpu_settings(devices: DeviceMode) -> SparkSettings:
    drtg = topology()
    shape = ExecutorShape(4, 4, 8_192)
    placement = place_executors(drtg, loaded(drtg, {}), shape, ShuffleProfile((GB,)))
    return spark_settings(
        drtg, placement, shape, template_dir="/t", gpus_per_executor=2, devices=devices
    )


def test_gpu_executors_with_the_device_plugin_use_sparks_resource_conf() -> None:
    settings = gpu_settings(DeviceMode.device_plugin)
    assert settings.conf["spark.executor.resource.gpu.amount"] == "2"
    assert settings.conf["spark.executor.resource.gpu.vendor"] == "nvidia.com"
    assert settings.conf["spark.executor.resource.gpu.discoveryScript"].endswith(
        "getGpusResources.sh"
    )
    assert settings.claim_templates == ()
    assert "resourceClaims" not in settings.executor_template["spec"]


def test_gpu_executors_through_dra_claim_from_a_template_and_skip_sparks_gpu_conf() -> None:
    settings = gpu_settings(DeviceMode.dra)
    assert not any(key.startswith("spark.executor.resource.gpu") for key in settings.conf)
    (template,) = settings.claim_templates
    validate_manifests(
        [settings.executor_template, settings.driver_template, template], DRA_KUBERNETES_VERSION
    )
    request = template["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert request["deviceClassName"] == "gpu.nvidia.com" and request["count"] == 2
    executor = settings.executor_template["spec"]
    name = template["metadata"]["name"]
    assert executor["resourceClaims"] == [{"name": "gpus", "resourceClaimTemplateName": name}]
    assert executor["containers"][0]["resources"] == {"claims": [{"name": "gpus"}]}
    assert "resourceClaims" not in settings.driver_template["spec"]


def test_spark_conf_cli_writes_the_claim_template_for_dra(tmp_path: Path) -> None:
    base = ["spark", "conf", "--executors", "2", "--cores", "1", "--memory", "1024"]
    base += ["--topology", "dgx-h100-pod"]  # GPU executors need GPU nodes
    out = tmp_path / "conf"
    dra = CliRunner().invoke(
        app, [*base, "--out", str(out), "--executor-gpus", "1", "--devices", "dra"]
    )
    assert dra.exit_code == 0, dra.output
    (template,) = yaml.safe_load_all((out / "gpu-claim-template.yaml").read_text())
    assert template["kind"] == "ResourceClaimTemplate"
    assert "gpu-claim-template.yaml" in (out / "plan.txt").read_text()
    plugin = CliRunner().invoke(app, [*base, "--out", str(out), "--executor-gpus", "1"])
    assert plugin.exit_code == 0, plugin.output
    assert "spark.executor.resource.gpu.amount=1" in plugin.stdout
    assert not (out / "gpu-claim-template.yaml").exists()
    cpu_only = CliRunner().invoke(app, [*base, "--out", str(out), "--devices", "dra"])
    assert cpu_only.exit_code == 2
    assert "give --executor-gpus" in " ".join(cpu_only.output.split())


def test_a_rack_label_kubernetes_would_refuse_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    # It becomes a topologyKey (label-key syntax).
    base = ["spark", "conf", "--executors", "2", "--cores", "1", "--memory", "1024"]
    out = tmp_path / "conf"
    for label in ("Bad Label!", "-rack", "kubesage.io/" + "r" * 64):
        bad = CliRunner().invoke(app, [*base, "--out", str(out), "--rack-label", label])
        assert bad.exit_code == 2, bad.output
        assert f"--rack-label {label!r} is not a Kubernetes label key" in " ".join(
            bad.output.split()
        )
        assert not out.exists()
    good = CliRunner().invoke(app, [*base, "--out", str(out), "--rack-label", "example.com/rack"])
    assert good.exit_code == 0, good.output


def test_spark_submit_options_before_the_separator_are_kubesages() -> None:
    args = ["spark", "submit", "--executors", "1", "--cores", "1", "--memory", "512"]
    result = CliRunner().invoke(app, [*args, "--executor-gpu", "1", "--", "app.py"])
    assert result.exit_code == 2
    assert "No such option: --executor-gpu" in result.output


@pytest.mark.parametrize(
    ("text", "mib"),
    [("4g", 4096), ("4G", 4096), ("4096m", 4096), ("4096", 4096), ("2gb", 2048), ("1t", 1 << 20),
     ("1049088k", 1024), ("536870912b", 512)],  # whole MiB, rounded down as Spark does
)  # fmt: skip
def test_executor_memory_reads_like_spark_executor_memory(text: str, mib: int) -> None:
    assert executor_memory_mib(text) == mib


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1.5g", "Spark reads whole numbers; write 1536m"),
        ("4 GiB", "not a JVM memory size like 4g or 4096m"),
        ("0m", "is 0 MiB; Spark refuses executors with less than 450 MiB"),
        ("4096b", "is 0 MiB"),  # bytes, as Spark reads them, not MiB
        ("449m", "is 449 MiB"),
    ],
)
def test_executor_memory_spark_would_refuse_is_refused(text: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        executor_memory_mib(text)


def test_racks_a_discovered_topology_names_without_a_label_still_select_their_nodes(
    tmp_path: Path,
) -> None:
    """Discovery names a rack without a label ``<node>-rack`` and a label value reused in
    two zones ``<zone>/<value>``: no node carries those, and ``/`` is not a label value."""
    nodes = [
        v1_node("n0", gpus=0, zone="z1", rack="r1"),
        v1_node("n1", gpus=0, zone="z2", rack="r1"),
        v1_node("n2", gpus=0, zone="z2"),
    ]
    drtg = DRTG(topology_from_nodes(nodes))
    assert set(drtg.rack_names) == {"z1/r1", "z2/r1", "n2-rack"}
    shape = ExecutorShape(3, 1, 1_024)
    placement = place_executors(
        drtg, ClusterState(drtg.node_specs()), shape, ShuffleProfile((GB,)), max_node_share=1.0
    )
    settings = spark_settings(drtg, placement, shape, template_dir="/t")
    validate_manifests([settings.executor_template, settings.driver_template])
    affinity = settings.executor_template["spec"]["affinity"]["nodeAffinity"]
    required = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    chosen = {drtg.node_names[n] for n in placement.nodes}
    assert chosen <= {by_name(term) for term in required}


def test_executors_are_placed_by_what_their_pods_ask_overhead_included(tmp_path: Path) -> None:
    # cpu-racks nodes have 512 GiB: five 100 GiB executors fit on one, but their pods ask
    # 110 GiB each (memory plus Spark's overhead, a tenth): four do.
    assert executor_pod_shape(ExecutorShape(40, 1, 102_400)).memory_mib == 112_640
    out = tmp_path / "conf"
    done = CliRunner().invoke(
        app,
        [
            "spark", "conf", "--executors", "40", "--cores", "1", "--memory", "100g",
            "--max-node-share", "1.0", "--out", str(out),
        ],
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    assert "balance: 10 node(s)" in (out / "plan.txt").read_text()


def test_the_executors_can_name_kubesages_scheduler_and_carry_their_input_locality(
    tmp_path: Path,
) -> None:
    """What the control loop's spark-placement needs to place them: the executors name
    kubesage's scheduler, and each carries the input locality the user gave."""
    out = tmp_path / "conf"
    done = CliRunner().invoke(
        app,
        [
            "spark", "conf", "--executors", "4", "--cores", "1", "--memory", "4g",
            "--out", str(out), "--scheduler-name", "kubesage",
            "--input-locality", "rack-a1=0.6",
        ],
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    assert "--conf spark.kubernetes.executor.scheduler.name=kubesage" in done.output
    annotation = f"spark.kubernetes.executor.annotation.{INPUT_LOCALITY_ANNOTATION}"
    assert f"{annotation}=rack-a1=0.6" in " ".join(done.output.split())
    bad = CliRunner().invoke(
        app,
        [
            "spark", "conf", "--executors", "4", "--cores", "1", "--memory", "4g",
            "--out", str(tmp_path / "bad"), "--scheduler-name", " ",
        ],
    )  # fmt: skip
    assert bad.exit_code == 2 and "is not a scheduler name" in bad.output


def test_gpu_executors_are_refused_on_a_topology_without_room_for_their_gpus(
    tmp_path: Path,
) -> None:
    base = ["spark", "conf", "--executors", "4", "--cores", "1", "--memory", "1024"]
    refused = CliRunner().invoke(
        app, [*base, "--out", str(tmp_path / "a"), "--executor-gpus", "1"]
    )  # the default cpu-racks has no GPUs
    assert refused.exit_code == 2
    words = " ".join(refused.output.split())
    assert "on the topology cpu-racks" in words and "1 GPU(s) do not fit" in words
    shape = ExecutorShape(6, 1, 1_024, gpus=4)
    drtg = DRTG.from_yaml(topology_file(Path("dgx-h100-pod")))
    placement = place_executors(
        drtg, ClusterState(drtg.node_specs()), shape, ShuffleProfile((GB,)), max_node_share=1.0
    )
    per_node = np.bincount(np.asarray(placement.nodes))
    assert per_node.max() <= 2  # 8-GPU nodes: two 4-GPU executors each, not CPU's worth


def test_two_jobs_planned_alike_into_two_folders_get_groups_of_their_own() -> None:
    drtg = topology()
    shape = ExecutorShape(8, 4, 8_192)
    placement = place_executors(drtg, loaded(drtg, {}), shape, ShuffleProfile((GB,)))
    one = spark_settings(drtg, placement, shape, template_dir="/jobs/etl")
    other = spark_settings(drtg, placement, shape, template_dir="/jobs/report")
    again = spark_settings(drtg, placement, shape, template_dir="/jobs/etl")
    group = one.executor_template["metadata"]["labels"][GROUP_LABEL]
    assert group != other.executor_template["metadata"]["labels"][GROUP_LABEL]
    assert group == again.executor_template["metadata"]["labels"][GROUP_LABEL]  # reproducible


def test_the_printed_flags_paste_into_a_shell_as_they_are(tmp_path: Path) -> None:
    out = tmp_path / "with space"
    done = CliRunner().invoke(
        app,
        ["spark", "conf", "--executors", "2", "--cores", "1", "--memory", "1g", "--out", str(out)],
    )
    assert done.exit_code == 0, done.output
    flags = shlex.split(done.stdout.strip().splitlines()[-1])
    template = f"spark.kubernetes.executor.podTemplateFile={out.resolve()}/executor-template.yaml"
    assert flags[flags.index(template) - 1] == "--conf"
