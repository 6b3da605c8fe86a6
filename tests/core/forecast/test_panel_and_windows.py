"""Reading metric files onto a grid, masks, normalisation and windows on hand-made series."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import numpy as np
import pytest

from kubesage.core.errors import InputError, TraceFormatError
from kubesage.core.forecast.panel import describe, read_entityless, read_panel
from kubesage.core.forecast.windows import Normaliser, earlier, last_observed, make_windows


def write(directory: Path, name: str, text: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    if name.endswith(".gz"):
        with gzip.open(directory / name, "wt") as handle:
            handle.write(text)
    else:
        (directory / name).write_text(text)


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    # Two pods on a 10 s grid from t=100. Pod "b" misses t=120 in cpu; "a" lives 100–130,
    # "b" 110–140. qps only has rows where positive; one gateway row without a pod.
    write(
        tmp_path,
        "pod_cpu_anon.csv",
        "value,timestamp_anon,container_ip\n"
        "1,100,a\n2,110,a\n3,120,a\n4,130,a\n10,110,b\n30,130,b\n40,140,b\n",
    )
    write(
        tmp_path,
        "pod_mem_anon.csv.gz",
        "timestamp_anon,value,container_ip\n"
        "100,0.5,a\n110,0.5,a\n120,0.5,a\n130,0.5,a\n110,0.1,b\n120,0.2,b\n130,0.3,b\n140,0.4,b\n",
    )
    write(
        tmp_path,
        "qps.csv",
        "timestamp_anon,value,container_ip,request_type\n120,0.09,a,Generative\n130,7,,API\n",
    )
    return tmp_path


def test_panel_aligns_and_masks_without_filling(tiny: Path) -> None:
    panel = read_panel(tiny)
    assert panel.entities == ("a", "b")
    assert panel.metrics == ("cpu", "mem", "qps")
    assert (panel.start_s, panel.step_s, panel.steps) == (100.0, 10.0, 5)
    cpu = panel.metrics.index("cpu")
    assert panel.mask[:, 1, cpu].tolist() == [False, True, False, True, True]
    assert panel.values[1, 1, cpu] == 10 and panel.values[3, 1, cpu] == 30
    assert panel.alive[:, 0].tolist() == [True, True, True, True, False]
    assert panel.alive[:, 1].tolist() == [False, True, True, True, True]
    qps = panel.metrics.index("qps")
    # Declared zero-fill: alive cells without a row read 0; the gateway row is counted, not used.
    assert panel.values[:, 0, qps].tolist() == [0.0, 0.0, 0.09, 0.0, 0.0]
    assert panel.mask[:, 0, qps].tolist() == [True, True, True, True, False]
    assert panel.excluded_rows == {"qps": 1}


def test_entities_outside_every_dense_metric_are_counted_and_said(tiny: Path) -> None:
    # "c" has memory only (a CPU-only pod beside GPU pods), "d" a request rate only.
    (tiny / "qps.csv").write_text(
        "timestamp_anon,value,container_ip,request_type\n"
        "120,0.09,a,Generative\n130,7,,API\n120,2,d,Generative\n130,3,d,Generative\n"
    )
    with gzip.open(tiny / "pod_mem_anon.csv.gz", "at") as handle:
        handle.write("100,0.9,c\n110,0.8,c\n120,0.7,c\n")
    panel = read_panel(tiny)
    assert panel.entities == ("a", "b")
    assert panel.left_out == {"mem": (1, 3), "qps": (1, 2)}
    said = describe(panel)
    assert "entities not in every one of cpu, mem not used: mem 1 (3 rows), qps 1 (2 rows)" in said
    assert panel.excluded_rows == {"qps": 1}  # the gateway row, counted apart


def test_two_samples_in_one_cell_are_averaged_and_counted(tmp_path: Path) -> None:
    write(tmp_path, "m.csv", "value,timestamp_anon,container_ip\n1,0,a\n3,10,a\n5,10.4,a\n7,20,a\n")
    panel = read_panel(tmp_path, absent_as_zero=())
    assert panel.values[:, 0, 0].tolist() == [1.0, 4.0, 7.0]
    assert panel.merged_samples == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("value,container_ip\n1,a\n", "lacks column(s) timestamp_anon"),
        ("value,timestamp_anon,container_ip\nx,0,a\n", "not a number: 'x'"),
        ("value,timestamp_anon,container_ip\n1,0,\n", "no rows with an entity id"),
        ("value,timestamp_anon,container_ip\n1,0,None\n2,0,NULL\n", "no rows with an entity id"),
        ("value,timestamp_anon,container_ip\ninf,0,a\n", "field 'value': not a finite number"),
        # A row's time is checked whatever its value: a NaN time is no missing sample.
        (
            "value,timestamp_anon,container_ip\n1,0,a\nNULL,nan,a\n",
            "m.csv:3, field 'timestamp_anon': not a finite number: 'nan'",
        ),
        ("value,timestamp_anon,container_ip\n,inf,a\n", "not a finite number: 'inf'"),
        ("value,timestamp_anon,container_ip\nn/a,0,a\n", "not a number: 'n/a'"),
    ],
)
def test_malformed_files(tmp_path: Path, text: str, message: str) -> None:
    write(tmp_path, "m.csv", text)
    with pytest.raises(TraceFormatError, match=re.escape(message)):
        read_panel(tmp_path)


def test_the_traces_missing_markers_are_missing_and_counted(tmp_path: Path) -> None:
    """The GenAI trace writes a missing container id as None or NULL (its README says to
    read both as missing); a value so marked, empty or NaN is a missing sample."""
    write(
        tmp_path,
        "pod_cpu_anon.csv",
        "value,timestamp_anon,container_ip\n"
        "1,0,a\n2,10,a\n3,20,a\nNULL,30,a\n5,40,a\n6,50,a\n,60,a\nnan,70,a\n9,80,a\n1,90,a\n",
    )
    write(
        tmp_path,
        "qps.csv",
        "timestamp_anon,value,container_ip,request_type\n"
        "0,2,a,Generative\n0,7,None,API\n10,5,NULL,API\n20,None,a,Generative\n",
    )
    panel = read_panel(tmp_path)
    assert panel.entities == ("a",)  # neither "None" nor "NULL" became a pod
    cpu = panel.metrics.index("cpu")
    assert np.flatnonzero(~panel.mask[:, 0, cpu]).tolist() == [3, 6, 7]
    assert panel.null_values == {"cpu": 3, "qps": 1}
    assert panel.excluded_rows == {"qps": 2}
    assert "values marked missing (empty, None, NULL, NaN) not used: cpu 3, qps 1" in describe(
        panel
    )
    assert read_entityless(tmp_path, panel, "qps")[:2].tolist() == [7.0, 5.0]


def test_empty_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"no \.csv"):
        read_panel(tmp_path)


def test_normaliser_uses_training_steps_only(tiny: Path) -> None:
    panel = read_panel(tiny)
    normaliser = Normaliser.fit(panel, until_step=3)
    cpu = panel.metrics.index("cpu")
    assert normaliser.mean[0, cpu] == pytest.approx(2.0)  # 1, 2, 3 — not 4
    assert normaliser.mean[1, cpu] == pytest.approx(10.0)  # only one training sample
    restored = normaliser.invert(normaliser.apply(panel.values))
    assert np.allclose(restored, panel.values)


def test_windows_shapes_masks_and_last_value(tiny: Path) -> None:
    panel = read_panel(tiny)
    normaliser = Normaliser.fit(panel, until_step=4)
    windows = make_windows(panel, normaliser, np.array([3, 4]), history=3, horizon=2)
    assert windows.inputs.shape == (2, 3, 2, 6)
    assert windows.targets.shape == (2, 2, 2, 3)
    cpu = panel.metrics.index("cpu")
    # Origin 4 forecasts steps 4 and 5; step 5 is past the data, so its target is masked.
    assert windows.target_mask[1, :, 1, cpu].tolist() == [True, False]
    # The mask channel of pod b's cpu over steps 0..2 (origin 3): missing, present, missing.
    assert windows.inputs[0, :, 1, 3 + cpu].tolist() == [0.0, 1.0, 0.0]
    assert windows.inputs[0, 0, 1, cpu] == 0.0  # a missing input is 0 with mask 0
    expected_last = normaliser.apply(panel.values)[1, 1, cpu]  # b's last cpu before step 3
    assert windows.last[0, 1, cpu] == pytest.approx(expected_last)
    with pytest.raises(InputError, match="history"):
        make_windows(panel, normaliser, np.array([1]), history=3, horizon=1)


def test_earlier_windows_cut_from_longer_ones_are_those_made_at_the_earlier_origins(
    tiny: Path,
) -> None:
    panel = read_panel(tiny)
    normaliser = Normaliser.fit(panel, until_step=4)
    long = make_windows(panel, normaliser, np.array([4, 5]), history=4, horizon=2)
    for shift in (0, 1):
        cut = earlier(long, shift, 3)
        made = make_windows(panel, normaliser, np.array([4, 5]) - shift, history=3, horizon=2)
        assert np.array_equal(cut.inputs, made.inputs)
        assert np.array_equal(cut.last, made.last)  # recomputed over the shorter cut
        assert cut.origins.tolist() == made.origins.tolist()
        assert not cut.target_mask.any()
    each = earlier(long, np.array([1, 0]), 3)  # a shift per window
    made = make_windows(panel, normaliser, np.array([3, 5]), history=3, horizon=2)
    assert np.array_equal(each.inputs, made.inputs) and np.array_equal(each.last, made.last)
    assert each.origins.tolist() == [3, 5]
    with pytest.raises(ValueError, match="cannot cut 3 steps 2 earlier from 4-step windows"):
        earlier(long, 2, 3)


def test_last_observed_falls_back_when_nothing_was_seen() -> None:
    values = np.array([[[1.0]], [[2.0]], [[9.0]]])
    mask = np.array([[[True]], [[True]], [[False]]])
    assert last_observed(values, mask, np.array([[5.0]])).tolist() == [[2.0]]
    assert last_observed(values, np.zeros_like(mask), np.array([[5.0]])).tolist() == [[5.0]]


def test_zero_filled_mask_never_depends_on_later_data(tmp_path: Path) -> None:
    dense = "value,timestamp_anon,container_ip\n" + "".join(f"1,{10 * s},a\n" for s in range(10))
    write(tmp_path / "early", "pod_cpu_anon.csv", dense)
    write(tmp_path / "early", "qps.csv", "timestamp_anon,value,container_ip\n30,1,a\n")
    write(tmp_path / "late", "pod_cpu_anon.csv", dense + "1,150,a\n")
    write(tmp_path / "late", "qps.csv", "timestamp_anon,value,container_ip\n30,1,a\n")
    early, late = read_panel(tmp_path / "early"), read_panel(tmp_path / "late")
    qps = early.metrics.index("qps")
    assert np.array_equal(early.mask[:, :, qps], late.mask[: early.steps, :, qps])
    assert not late.mask[10:15, 0, qps].any()  # no report from the pod there: missing, not 0


def test_request_types_of_one_entity_add_up(tmp_path: Path) -> None:
    write(tmp_path, "pod_cpu_anon.csv", "value,timestamp_anon,container_ip\n1,0,a\n1,10,a\n")
    write(
        tmp_path,
        "qps.csv",
        "timestamp_anon,value,container_ip,request_type\n10,0.5,a,Generative\n10,0.25,a,API\n",
    )
    panel = read_panel(tmp_path)
    assert panel.values[1, 0, panel.metrics.index("qps")] == pytest.approx(0.75)


def test_rows_without_an_entity_are_a_rate_per_step_of_the_panels_grid(tmp_path: Path) -> None:
    write(
        tmp_path, "pod_cpu_anon.csv", "value,timestamp_anon,container_ip\n1,0,a\n1,10,a\n1,20,a\n"
    )
    write(
        tmp_path,
        "qps.csv",
        "timestamp_anon,value,container_ip,request_type\n"
        "10,0.5,a,Generative\n9,2,,API\n11,3,,API\n20,4,,API\n900,8,,API\n",
    )
    panel = read_panel(tmp_path)
    # Steps 0, 1, 2; the row at t = 900 lies outside the panel's grid. Two samples of the
    # API rate in step 1 are one rate: their mean.
    assert read_entityless(tmp_path, panel, "qps").tolist() == [0.0, 2.5, 4.0]
    assert read_entityless(tmp_path, panel, "cpu").tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(InputError, match="no file gives metric 'memory'"):
        read_entityless(tmp_path, panel, "memory")


@pytest.mark.parametrize("cut_off", [525.0, 533.0, 540.0, 570.0, 571.0])
def test_steps_before_the_cut_off_hold_only_earlier_samples(tmp_path: Path, cut_off: float) -> None:
    # 57 s sampling with jitter: step k holds samples from (k − ½) to (k + ½) steps.
    times = [57 * s + (25 if s % 2 else -20) for s in range(1, 15)]
    write(
        tmp_path,
        "m.csv",
        "value,timestamp_anon,container_ip\n0,0,a\n" + "".join(f"{t},{t},a\n" for t in times),
    )
    panel = read_panel(tmp_path, absent_as_zero=())
    first_test = panel.step_of(cut_off)
    training = panel.values[:first_test, 0, 0][panel.mask[:first_test, 0, 0]]
    testing = panel.values[first_test:, 0, 0][panel.mask[first_test:, 0, 0]]
    assert (training < cut_off).all()
    assert testing.min() > training.max()


def test_exact_repeats_in_a_request_type_file_are_not_added_again(tmp_path: Path) -> None:
    write(tmp_path, "pod_cpu_anon.csv", "value,timestamp_anon,container_ip\n1,0,a\n1,10,a\n")
    write(
        tmp_path,
        "qps.csv",
        "timestamp_anon,value,container_ip,request_type\n"
        "10,0.5,a,Generative\n10,0.25,a,API\n10,0.5,a,Generative\n",
    )
    panel = read_panel(tmp_path)
    assert panel.values[1, 0, panel.metrics.index("qps")] == pytest.approx(0.75)
    assert panel.duplicate_rows == {"qps": 1}
    assert "rows repeating an earlier row exactly, not added again: qps 1" in describe(panel)


def test_a_zero_filled_metric_without_rows_reads_zero_wherever_alive(tmp_path: Path) -> None:
    write(tmp_path, "pod_cpu_anon.csv", "value,timestamp_anon,container_ip\n1,0,a\n1,10,a\n")
    write(tmp_path, "qps.csv", "timestamp_anon,value,container_ip,request_type\n5,3,,API\n")
    panel = read_panel(tmp_path)
    qps = panel.metrics.index("qps")
    assert panel.values[:, 0, qps].tolist() == [0.0, 0.0]
    assert panel.mask[:, 0, qps].all()
    assert "no rows with an entity id (0 wherever alive): qps" in describe(panel)


@pytest.mark.parametrize(
    ("qps_time", "named"),
    [
        ("0", r"earliest timestamp is qps\.csv:3 \(0\)"),  # a stray zero
        ("1662945220000", r"latest qps\.csv:3 \(1\.66295e\+12\)"),  # milliseconds in one file
    ],
)
def test_a_stray_timestamp_is_refused_before_the_grid_is_built(
    tmp_path: Path, qps_time: str, named: str
) -> None:
    write(
        tmp_path,
        "pod_cpu_anon.csv",
        "value,timestamp_anon,container_ip\n1,1662945163,a\n1,1662945220,a\n",
    )
    write(
        tmp_path,
        "qps.csv",
        "timestamp_anon,value,container_ip,request_type\n"
        f"1662945163,1,a,Generative\n{qps_time},2,a,Generative\n",
    )
    with pytest.raises(InputError, match=f"over the limit of 50,000,000; .*{named}.*in seconds"):
        read_panel(tmp_path)


def test_the_grid_spans_only_the_entities_used(tmp_path: Path) -> None:
    # "c" reports memory only, and hours before the others: it is left out, so its
    # samples move neither the grid's start nor a +DURATION measured from it.
    write(tmp_path, "pod_cpu_anon.csv", "value,timestamp_anon,container_ip\n1,1000,a\n1,1010,a\n")
    write(
        tmp_path,
        "pod_mem_anon.csv",
        "value,timestamp_anon,container_ip\n1,1000,a\n1,1010,a\n5,0,c\n5,10,c\n",
    )
    panel = read_panel(tmp_path)
    assert (panel.entities, panel.start_s, panel.steps) == (("a",), 1000.0, 2)


def test_the_grid_step_is_the_entities_used_own(tmp_path: Path) -> None:
    # "c" reports memory only, every 10 s and far more often than "a" (every 60 s): it
    # is left out, so its cadence must not set the grid's step either.
    a_rows = "".join(f"1,{t},a\n" for t in range(0, 600, 60))
    c_rows = "".join(f"5,{t},c\n" for t in range(0, 600, 10))
    write(tmp_path, "pod_cpu_anon.csv", "value,timestamp_anon,container_ip\n" + a_rows)
    write(tmp_path, "pod_mem_anon.csv", "value,timestamp_anon,container_ip\n" + a_rows + c_rows)
    panel = read_panel(tmp_path)
    assert (panel.entities, panel.step_s, panel.steps) == (("a",), 60.0, 10)
    assert panel.mask.all()


def test_a_long_stretch_without_any_entity_is_said(tmp_path: Path) -> None:
    rows = "".join(f"1,{t},a\n" for t in range(0, 200, 10)) + "1,2000,a\n"
    write(tmp_path, "pod_cpu_anon.csv", "value,timestamp_anon,container_ip\n" + rows)
    said = describe(read_panel(tmp_path))
    assert "no entity reported for 30m (steps 20–199, 90% of the grid)" in said
    # One missing step of 21 is a gap within the data, under 5 % of the grid: not said.
    rows = "".join(f"1,{t},a\n" for t in range(0, 210, 10) if t != 100)
    write(tmp_path / "gap", "pod_cpu_anon.csv", "value,timestamp_anon,container_ip\n" + rows)
    assert "no entity reported" not in describe(read_panel(tmp_path / "gap"))


def test_values_below_zero_are_kept_and_said(tmp_path: Path) -> None:
    write(tmp_path, "pod_cpu_anon.csv", "value,timestamp_anon,container_ip\n-5,0,a\n1,10,a\n")
    panel = read_panel(tmp_path)
    assert panel.values[0, 0, 0] == -5.0 and panel.negative_values == {"cpu": 1}
    assert "values below 0 (kept; check the source): cpu 1" in describe(panel)


def test_a_rate_sampled_finer_than_the_grid_is_averaged_per_request_type(tmp_path: Path) -> None:
    # The dense metric every 60 s; one pod's request rate every 30 s, constant per type.
    write(
        tmp_path,
        "pod_cpu_anon.csv",
        "value,timestamp_anon,container_ip\n" + "".join(f"1,{t},a\n" for t in range(0, 301, 60)),
    )
    rows = "".join(f"{t},1.0,a,Generative\n{t},0.5,a,API\n" for t in range(0, 301, 30))
    write(tmp_path, "qps.csv", "timestamp_anon,value,container_ip,request_type\n" + rows)
    panel = read_panel(tmp_path)
    qps = panel.values[:, 0, panel.metrics.index("qps")]
    assert qps.tolist() == [1.5] * 6  # 1.0 + 0.5 at every step, however many samples


def test_samples_half_a_step_off_the_grid_fill_one_step_each(tmp_path: Path) -> None:
    write(
        tmp_path,
        "pod_a_anon.csv",
        "value,timestamp_anon,container_ip\n" + "".join(f"{t},{t},p\n" for t in range(0, 421, 60)),
    )
    write(
        tmp_path,
        "pod_b_anon.csv",
        "value,timestamp_anon,container_ip\n" + "".join(f"{t},{t},p\n" for t in range(30, 451, 60)),
    )
    panel = read_panel(tmp_path)
    b = panel.metrics.index("b")
    assert panel.mask[1:, 0, b].all()  # halves round up: no step doubled, none empty
    assert panel.values[1:, 0, b].tolist() == list(range(30, 451, 60))
    assert panel.merged_samples == 0


@pytest.mark.parametrize(
    ("row", "found"), [("1,1114\n", 2), ("1,1057,x,extra\n", 4)], ids=["short", "long"]
)
def test_a_row_with_another_number_of_fields_is_an_error(
    tmp_path: Path, row: str, found: int
) -> None:
    write(tmp_path, "pod_cpu_anon.csv", "value,timestamp_anon,container_ip\n1,0,a\n" + row)
    with pytest.raises(TraceFormatError, match=f"csv:3: expected 3 fields, found {found}"):
        read_panel(tmp_path)


def test_a_stray_row_off_the_grids_phase_does_not_move_the_others(tmp_path: Path) -> None:
    # Two pods sampled every 57 s with ±1 s jitter, and one early row half a step off
    # that phase: the grid keeps the phase most samples keep.
    jitter = [0, 0, 1, 1, 0, 0, -1, -1] * 4
    lines = [f"{k},{57 * k + jitter[k]},{pod}\n" for k in range(30) for pod in "ab"]
    stray = "0,-28,a\n"  # 28 s before the first step
    write(
        tmp_path,
        "pod_cpu_anon.csv",
        "value,timestamp_anon,container_ip\n" + stray + "".join(lines),
    )
    panel = read_panel(tmp_path)
    assert panel.step_s == 57
    assert panel.merged_samples <= 1  # the stray row itself shares the first step
    cpu = panel.metrics.index("cpu")
    for pod in range(2):
        steps = np.flatnonzero(panel.mask[:, pod, cpu])
        values = panel.values[steps, pod, cpu].tolist()
        assert values[-29:] == list(range(1, 30))  # each sample in a step of its own, in order


def test_an_empty_file_and_a_header_ending_in_a_comma_are_named_as_such(tmp_path: Path) -> None:
    (tmp_path / "pod_cpu_anon.csv.gz").write_bytes(b"")  # not "not gzip-compressed"
    with pytest.raises(TraceFormatError, match=r"csv\.gz:1: empty file"):
        read_panel(tmp_path)
    (tmp_path / "pod_cpu_anon.csv.gz").unlink()
    write(tmp_path, "pod_cpu_anon.csv", "value,timestamp_anon,container_ip,\n1,0,a,\n")
    with pytest.raises(TraceFormatError, match="empty column name \\(a trailing comma\\?\\)"):
        read_panel(tmp_path)


def test_spaces_around_the_column_names_are_not_part_of_them(tmp_path: Path) -> None:
    write(tmp_path, "pod_cpu_anon.csv", "value, timestamp_anon , container_ip\n1,0,a\n2,60,a\n")
    panel = read_panel(tmp_path)
    assert panel.values[:, 0, 0].tolist() == [1.0, 2.0]


def test_the_metric_files_to_read_can_be_named(tmp_path: Path) -> None:
    write(tmp_path, "pod_cpu_anon.csv", "value,timestamp_anon,container_ip\n1,0,a\n2,60,a\n")
    write(tmp_path, "pod_mem_anon.csv", "value,timestamp_anon,container_ip\n5,0,a\n6,60,a\n")
    write(tmp_path, "lora_request_trace.csv", "request_id,arrival\nr1,3\n")  # not a metric
    with pytest.raises(
        TraceFormatError, match=r"lacks column.*name the ones to read \(--metrics\)"
    ):
        read_panel(tmp_path)
    panel = read_panel(tmp_path, metrics=["mem", "cpu"])
    assert panel.metrics == ("cpu", "mem")
    assert panel.values[:, 0, 1].tolist() == [5.0, 6.0]
    with pytest.raises(
        InputError, match="no metric file for gpu; it has cpu, lora_request_trace, mem"
    ):
        read_panel(tmp_path, metrics=["gpu"])
