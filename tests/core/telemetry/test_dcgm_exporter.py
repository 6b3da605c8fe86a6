"""The DCGM replay exporter (a fake dcgm-exporter) serving the real GenAI trace over HTTP."""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from kubesage.core.errors import InputError
from kubesage.core.forecast.panel import MetricPanel
from kubesage.core.telemetry.dcgm_exporter import (
    HELP,
    LABELS,
    MIB,
    SHARED_DATA_ENV,
    DcgmReplay,
    DcgmReplayExporter,
    GpuModel,
    busiest_pods,
    default_genai_dir,
    main,
)


class FakeClock:
    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def scrape(exporter: DcgmReplayExporter) -> dict[str, list[tuple[dict[str, str], float]]]:
    response = httpx.get(exporter.url, timeout=5)
    response.raise_for_status()
    return {
        family.name: [(dict(s.labels), s.value) for s in family.samples]
        for family in text_string_to_metric_families(response.text)
    }


def first_step(panel: MetricPanel, pod: str, *, alive: bool, observed: bool = True) -> int:
    """The first step where ``pod`` is (not) running and (has) its duty cycle."""
    n = panel.entities.index(pod)
    duty = panel.metrics.index("gpu_duty_cycle")
    memory = panel.metrics.index("gpu_memory_used_bytes")
    ok = panel.alive[:, n] == alive
    if alive:
        ok &= (panel.mask[:, n, duty] & panel.mask[:, n, memory]) == observed
    return int(np.argmax(ok))


def test_busiest_pods_rank_by_mean_duty_cycle(genai_panel: MetricPanel) -> None:
    pods = busiest_pods(genai_panel, 5)
    m = genai_panel.metrics.index("gpu_duty_cycle")
    means = [
        genai_panel.values[genai_panel.mask[:, n, m], n, m].mean()
        for n in (genai_panel.entities.index(p) for p in pods)
    ]
    assert means == sorted(means, reverse=True)
    assert means[0] > 20.0  # the trace's busiest pod is not idle


def test_scrape_serves_dcgm_names_labels_and_the_traces_values(genai_panel: MetricPanel) -> None:
    pod = busiest_pods(genai_panel, 1)[0]
    step = first_step(genai_panel, pod, alive=True)
    clock = FakeClock()
    replay = DcgmReplay(
        genai_panel, hostname="gpu-node-7", pods=[pod], start_step=step, clock=clock
    )
    with DcgmReplayExporter(replay) as exporter:
        families = scrape(exporter)
    assert set(families) == set(HELP)
    n = genai_panel.entities.index(pod)
    duty = genai_panel.values[step, n, genai_panel.metrics.index("gpu_duty_cycle")]
    memory = genai_panel.values[step, n, genai_panel.metrics.index("gpu_memory_used_bytes")]
    [(labels, util)] = families["DCGM_FI_DEV_GPU_UTIL"]
    assert set(labels) == set(LABELS)
    assert labels["gpu"] == "0" and labels["device"] == "nvidia0"
    assert labels["Hostname"] == "gpu-node-7" and labels["pod"] == pod
    assert labels["UUID"].startswith("GPU-") and labels["modelName"] == GpuModel().name
    assert util == round(duty)
    [(_, used)] = families["DCGM_FI_DEV_FB_USED"]
    [(_, free)] = families["DCGM_FI_DEV_FB_FREE"]
    assert used == round(memory / MIB)
    assert used + free == GpuModel().fb_total_mib
    [(_, engine)] = families["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]
    [(_, sm)] = families["DCGM_FI_PROF_SM_ACTIVE"]
    assert engine == pytest.approx(duty / 100.0)
    assert 0.0 <= sm <= engine <= 1.0


def test_speed_sets_trace_seconds_per_wall_second(genai_panel: MetricPanel) -> None:
    clock = FakeClock()
    pods = busiest_pods(genai_panel, 2)
    replay = DcgmReplay(genai_panel, hostname="h", pods=pods, speed=57.0, clock=clock)
    seconds_per_step = genai_panel.step_s / 57.0
    assert replay.step_at(clock.now) == 0
    assert replay.step_at(clock.now + 3 * seconds_per_step + 1e-6) == 3
    # the trace loops at its end
    assert replay.step_at(clock.now + genai_panel.steps * seconds_per_step + 1e-6) == 0


def test_idle_step_shows_an_idle_gpu_without_pod_labels(genai_panel: MetricPanel) -> None:
    n = int(np.argmax((~genai_panel.alive).any(axis=0)))  # a pod that is absent somewhere
    pod = genai_panel.entities[n]
    step = first_step(genai_panel, pod, alive=False)
    replay = DcgmReplay(genai_panel, hostname="h", pods=[pod], start_step=step, clock=FakeClock())
    [sample] = replay.samples(step)
    assert sample.pod is None
    assert sample.values["DCGM_FI_DEV_GPU_UTIL"] == 0
    assert replay.labels(0, None)[LABELS.index("pod")] == ""


def test_gap_in_the_trace_holds_the_latest_reading(genai_panel: MetricPanel) -> None:
    duty = genai_panel.metrics.index("gpu_duty_cycle")
    observed = genai_panel.mask[:, :, duty]
    seen_before = np.zeros_like(observed)
    seen_before[1:] = np.logical_or.accumulate(observed, axis=0)[:-1]
    steps, pods = np.nonzero(genai_panel.alive & ~observed & seen_before)
    assert steps.size, "the trace has gaps while pods run"
    step, n = int(steps[0]), int(pods[0])
    latest = np.nonzero(observed[:step, n])[0][-1]
    replay = DcgmReplay(genai_panel, hostname="h", pods=[genai_panel.entities[n]])
    [sample] = replay.samples(step)
    assert sample.pod == genai_panel.entities[n]
    assert sample.values["DCGM_FI_DEV_GPU_UTIL"] == round(genai_panel.values[latest, n, duty])


def test_a_running_pod_before_its_first_reading_shows_that_reading(
    genai_panel: MetricPanel,
) -> None:
    """The trace's sampling of a pod can begin after the pod did (at the trace's start,
    where the replay comes back to whenever it loops); DCGM would report its GPU, so
    the replay shows the first reading there rather than leaving the GPU's series out."""
    duty = genai_panel.metrics.index("gpu_duty_cycle")
    observed = genai_panel.mask[:, :, duty]
    unread = genai_panel.alive & ~np.logical_or.accumulate(observed, axis=0)
    steps, pods = np.nonzero(unread & observed.any(axis=0))
    assert steps.size, "the trace has pods running before their first reading"
    step, n = int(steps[0]), int(pods[0])
    first = int(np.argmax(observed[:, n]))
    replay = DcgmReplay(genai_panel, hostname="h", pods=[genai_panel.entities[n]])
    [sample] = replay.samples(step)
    assert sample.values["DCGM_FI_DEV_GPU_UTIL"] == round(genai_panel.values[first, n, duty])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"pods": []}, "at least one GPU"),
        ({"pods": ["no-such-pod"]}, "not in the trace"),
        ({"speed": 0.0}, "positive"),
        ({"speed": float("nan")}, "positive"),
    ],
)
def test_bad_replay_arguments_are_input_errors(
    genai_panel: MetricPanel, kwargs: dict[str, object], message: str
) -> None:
    arguments: dict[str, object] = {"pods": busiest_pods(genai_panel, 1), "hostname": "h"}
    arguments.update(kwargs)
    with pytest.raises(InputError, match=message):
        DcgmReplay(genai_panel, **arguments)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="pods"):
        busiest_pods(genai_panel, 0)


def test_the_command_needs_a_data_dir_or_the_shared_data_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv(SHARED_DATA_ENV, str(tmp_path))  # set, it alone decides: no genai/
    assert default_genai_dir() is None
    with pytest.raises(SystemExit) as stopped:
        main(["--gpus", "1"])
    assert stopped.value.code == 2
    assert f"give --data-dir (the GenAI trace's genai/ folder) or set {SHARED_DATA_ENV}" in (
        capsys.readouterr().err
    )
    (tmp_path / "genai").mkdir()
    assert default_genai_dir() == tmp_path / "genai"


def test_a_shared_data_variable_naming_no_folder_is_one_error_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv(SHARED_DATA_ENV, str(tmp_path / "mistyped"))
    with pytest.raises(SystemExit) as stopped:
        main(["--gpus", "1"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert f"{SHARED_DATA_ENV} is set to" in err and "Traceback" not in err
