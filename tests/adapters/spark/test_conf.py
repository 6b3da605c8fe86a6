"""Spark conf and pod templates for a placement."""

from __future__ import annotations

import numpy as np

from kubesage.adapters.spark.conf import GROUP_LABEL, spark_settings
from kubesage.adapters.spark.placement import ExecutorShape, place_executors
from kubesage.adapters.spark.shuffle_model import ShuffleProfile
from kubesage.core.k8s.validation import validate_manifests
from tests.adapters.spark.test_placement import loaded, topology

GB = 10**9


def test_one_rack_gets_a_node_selector_and_templates_that_validate() -> None:
    drtg = topology()
    shape = ExecutorShape(8, 4, 8_192)
    placement = place_executors(drtg, loaded(drtg, {}), shape, ShuffleProfile((GB,)))
    settings = spark_settings(drtg, placement, shape, template_dir="/t", local_dir="/mnt/nvme")
    rack = next(iter(placement.executors_per_rack(drtg)))
    assert settings.conf["spark.kubernetes.executor.node.selector.kubesage.io/rack"] == rack
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
    assert required["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == [rack]
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
    weights = {p["preference"]["matchExpressions"][0]["values"][0]: p["weight"] for p in preferred}
    assert weights == {"za-r0": 67, "za-r1": 33}
    driver = settings.driver_template["spec"]["affinity"]["nodeAffinity"]
    first = driver["preferredDuringSchedulingIgnoredDuringExecution"][0]["preference"]
    assert first["matchExpressions"][0] == {"key": "rack", "operator": "In", "values": ["za-r0"]}
    assert np.isfinite(placement.estimate.cross_rack_bytes)
