"""NVML feeds the loop's forecast panel where a GPU is present, and nothing where none is."""

from __future__ import annotations

import pytest

from kubesage.adapters.gpu_training.fake_nvml import FakeGpu, FakeNvml
from kubesage.adapters.gpu_training.nvml_samples import (
    FB_USED_METRIC,
    NodeGpuCollector,
    node_gpu_collectors,
)
from kubesage.core.errors import DependencyError
from kubesage.core.loop.forecasts import GPU_UTIL_METRIC
from kubesage.core.loop.world import WorldModel


def test_gpu_utilisation_reaches_the_forecast_panel_under_dcgm_names() -> None:
    nvml = FakeNvml([FakeGpu(utilization_pct=87, memory_used_mib=4096), FakeGpu(utilization_pct=3)])
    (collector,) = node_gpu_collectors(nvml, node="gpu-node-1")
    world = WorldModel()
    world.update({collector.name: collector.collect()})
    panel = world.forecasts
    assert panel.predict("gpu-node-1", GPU_UTIL_METRIC.format(gpu=0)) == 87.0
    assert panel.predict("gpu-node-1", GPU_UTIL_METRIC.format(gpu=1)) == 3.0
    assert panel.predict("gpu-node-1", FB_USED_METRIC.format(gpu=0)) == 4096.0


def test_no_driver_adds_no_collector_and_a_lost_driver_raises_for_the_loop() -> None:
    assert node_gpu_collectors(FakeNvml(driver_loaded=False), node="cpu-node") == []
    assert node_gpu_collectors(FakeNvml([]), node="no-gpus") == []
    nvml = FakeNvml([FakeGpu()])
    collector = NodeGpuCollector("gpu-node-1", nvml)
    collector.collect()
    nvml.driver_loaded = False
    with pytest.raises(DependencyError, match="NVML on gpu-node-1"):
        collector.collect()
    assert collector.failures == 1


def test_a_node_with_a_mig_gpu_still_gets_its_collector() -> None:
    nvml = FakeNvml([FakeGpu(mig=True, memory_used_mib=512), FakeGpu(utilization_pct=9)])
    (collector,) = node_gpu_collectors(nvml, node="mig-node")
    samples = set(collector.collect().data.metric_samples())
    assert ("mig-node", GPU_UTIL_METRIC.format(gpu=1), 9.0) in samples
    assert ("mig-node", FB_USED_METRIC.format(gpu=0), 512.0) in samples
    assert not any(metric == GPU_UTIL_METRIC.format(gpu=0) for _, metric, _ in samples)
