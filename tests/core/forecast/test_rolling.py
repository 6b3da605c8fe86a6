"""Rolling-origin evaluation: the blocks, what each model may see, and the mean over blocks."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from kubesage.core.errors import InputError
from kubesage.core.forecast import evaluate as evaluate_module
from kubesage.core.forecast.evaluate import evaluate
from kubesage.core.forecast.forecaster import WindowedForecaster, make_forecaster
from kubesage.core.forecast.panel import MetricPanel, read_panel
from kubesage.core.forecast.rolling import Block, blocks_after, mean_over, rolling_evaluate
from kubesage.core.forecast.synthetic import write_synthetic_metrics
from kubesage.core.forecast.training import TrainConfig

FAST_MODELS = ("linear", "last_value")


@pytest.fixture(scope="module")
def panel(tmp_path_factory: pytest.TempPathFactory) -> MetricPanel:
    return read_panel(
        write_synthetic_metrics(tmp_path_factory.mktemp("metrics"), entities=6, steps=240)
    )


def test_blocks_split_the_test_steps_evenly_and_the_last_takes_the_rest() -> None:
    assert blocks_after(100, 200, 3) == [Block(100, 133), Block(133, 166), Block(166, 200)]
    assert blocks_after(100, 200, 1) == [Block(100, 200)]
    with pytest.raises(InputError, match="cannot make 4 blocks"):
        blocks_after(100, 110, 4, min_steps=5)
    with pytest.raises(InputError, match="at least 1"):
        blocks_after(100, 200, 0)


def test_each_model_trains_before_its_block_and_is_scored_inside_it(
    panel: MetricPanel, monkeypatch: pytest.MonkeyPatch
) -> None:
    fits: list[int] = []

    def recording(name: str, **kwargs: object) -> WindowedForecaster:
        forecaster = make_forecaster(name, **kwargs)  # type: ignore[arg-type]
        original = forecaster.fit

        def fit(data: MetricPanel, until_step: int) -> None:
            fits.append(until_step)
            original(data, until_step)

        forecaster.fit = fit  # type: ignore[method-assign]
        return forecaster

    monkeypatch.setattr(evaluate_module, "make_forecaster", recording)
    result = rolling_evaluate(panel, 120, 3, horizons=(1, 4), models=("linear",))
    blocks = result.document["blocks"]
    assert isinstance(blocks, list) and len(blocks) == 3
    assert fits == [120, 160, 200]  # every fit ends at its block's cut-off
    for block, start, end in zip(blocks, (120, 160, 200), (160, 200, 240), strict=True):
        assert block["train_until"] == pytest.approx(panel.start_s + start * panel.step_s)
        assert block["test_until"] == pytest.approx(panel.start_s + end * panel.step_s)
        assert block["test_steps"] == end - start


def test_a_block_depends_on_nothing_after_it(panel: MetricPanel) -> None:
    result = rolling_evaluate(panel, 120, 2, horizons=(1, 4), models=FAST_MODELS)
    blocks = result.document["blocks"]
    assert isinstance(blocks, list)
    alone = evaluate(panel.head(180), 120, horizons=(1, 4), models=FAST_MODELS)
    assert blocks[0]["models"] == alone.document["models"]
    later = panel.head(240)
    later.values = later.values.copy()
    later.values[180:] *= 7.0
    changed = rolling_evaluate(later, 120, 2, horizons=(1, 4), models=FAST_MODELS)
    changed_blocks = changed.document["blocks"]
    assert isinstance(changed_blocks, list)
    assert changed_blocks[0]["models"] == blocks[0]["models"]
    assert changed_blocks[1]["models"] != blocks[1]["models"]


def test_models_hold_the_mean_over_blocks(panel: MetricPanel) -> None:
    result = rolling_evaluate(
        panel,
        120,
        2,
        horizons=(1, 4),
        models=("lstm", "last_value"),
        ablations=("stgcn_temporal",),
        config=TrainConfig(epochs=1, batch_size=32),
    )
    document = result.document
    blocks = document["blocks"]
    assert isinstance(blocks, list) and document["rolling"] == 2
    models, ablations = document["models"], document["ablations"]
    assert isinstance(models, dict) and isinstance(ablations, dict)
    assert set(models) == {"lstm", "last_value"} and set(ablations) == {"stgcn_temporal"}
    for name in models:
        for h in ("1", "4"):
            for key in ("wape", "mape_nonzero", "smape"):
                expected = np.mean([b["models"][name][h][key] for b in blocks])
                assert models[name][h][key] == pytest.approx(expected)
            cells = sum(b["models"][name][h]["burst"]["cells"] for b in blocks)
            assert models[name][h]["burst"]["cells"] == cells


def test_quantiles_add_scores_and_change_no_point_figure(panel: MetricPanel) -> None:
    config = TrainConfig(epochs=1, batch_size=32)
    models = ("lstm", "stgcn", "last_value")
    plain = rolling_evaluate(panel, 120, 2, horizons=(1, 4), models=models, config=config)
    scored = rolling_evaluate(
        panel,
        120,
        2,
        horizons=(1, 4),
        models=models,
        ablations=("stgcn_temporal",),
        quantiles=(0.8, 0.95),
        config=config,
    )
    document = scored.document
    means, blocks = document["models"], document["blocks"]
    assert isinstance(means, dict) and isinstance(blocks, list)
    for name, per_h in means.items():
        for h, entry in per_h.items():
            levels = entry.pop("quantiles")
            assert set(levels) == {"0.8", "0.95"}
            for q, level in levels.items():
                assert set(level) == {"wql", "coverage", "per_metric"}
                assert set(level["per_metric"]) == set(panel.metrics)
                expected = np.mean([b["models"][name][h]["quantiles"][q]["wql"] for b in blocks])
                assert level["wql"] == pytest.approx(expected)
            assert levels["0.95"]["coverage"] >= levels["0.8"]["coverage"]
    assert means == plain.document["models"]  # the point figures, untouched
    ablations = document["ablations"]
    assert isinstance(ablations, dict)
    assert all("quantiles" not in entry for entry in ablations["stgcn_temporal"].values())
    assert {"lstm@q", "stgcn@q", "last_value@q"} <= set(scored.train_seconds)
    with pytest.raises(InputError, match="between 0 and 1"):
        evaluate(panel, 120, horizons=(1,), models=("last_value",), quantiles=(1.5,))


def test_mean_over_skips_missing_figures() -> None:
    merged = mean_over([{"a": 1.0, "b": None, "cells": 2}, {"a": 3.0, "b": 4.0, "cells": 5}])
    assert merged == {"a": 2.0, "b": 4.0, "cells": 7}


def test_a_folder_of_plain_csv_files(tmp_path: Path) -> None:
    import gzip

    compressed = write_synthetic_metrics(tmp_path / "gz", entities=4, steps=200)
    plain = tmp_path / "plain"
    plain.mkdir()
    for path in compressed.iterdir():
        (plain / path.name.removesuffix(".gz")).write_bytes(gzip.decompress(path.read_bytes()))
    a, b = read_panel(compressed), read_panel(plain)
    assert a.metrics == b.metrics and a.entities == b.entities
    assert np.array_equal(a.mask, b.mask) and np.allclose(a.values, b.values)
    result = rolling_evaluate(b, 120, 2, horizons=(1,), models=("last_value",))
    assert isinstance(result.document["blocks"], list)


def test_what_did_not_go_as_asked_is_in_the_documents_notes(panel: MetricPanel) -> None:
    # 30 steps before the cut-off are too few to train on (a cold start: the last value,
    # under the model's name), and 10 test steps cannot score 15 steps ahead.
    result = evaluate(panel.head(40), 30, horizons=(1, 15), models=("linear", "last_value"))
    notes = result.document["notes"]
    assert isinstance(notes, dict)
    assert "cold start" in notes["linear"]
    assert notes["h=15"] == "needs at least 15 test steps and there are 10: its figures are null"
    models = result.document["models"]
    assert isinstance(models, dict)
    assert models["linear"]["15"]["wape"] is None
    assert result.notes == notes  # the CLI prints the same as warnings
    rolled = rolling_evaluate(panel, 120, 2, horizons=(1, 4), models=FAST_MODELS)
    assert "notes" not in rolled.document  # nothing to say


def test_a_metric_without_non_zero_truth_in_a_block_still_counts_through_the_others(
    panel: MetricPanel,
) -> None:
    # No request in the second block (a quiet hour): the request rate's WAPE is 0 / 0
    # there. The mean's headline is each metric's own mean over the blocks where it is
    # defined, averaged over metrics — not a mean of a 4-metric and a 3-metric headline.
    qps = panel.metrics.index("qps")
    values = panel.values.copy()
    values[170:, :, qps] = 0.0
    quiet = replace(panel, values=values)
    result = rolling_evaluate(quiet, 120, 2, horizons=(1,), models=("last_value",))
    document = result.document
    blocks, notes = document["blocks"], document["notes"]
    assert isinstance(blocks, list) and isinstance(notes, dict)
    assert blocks[1]["models"]["last_value"]["1"]["per_metric"]["qps"]["wape"] is None
    assert notes["wape qps (block 2)"] == (
        "no non-zero qps in the test steps (h=1): its WAPE is undefined (null) and the "
        "headline WAPE there averages the other metrics"
    )
    assert "wape qps (block 1)" not in notes
    mean = document["models"]["last_value"]["1"]
    per_metric = [mean["per_metric"][m]["wape"] for m in panel.metrics]
    assert (
        mean["per_metric"]["qps"]["wape"]
        == blocks[0]["models"]["last_value"]["1"]["per_metric"]["qps"]["wape"]
    )
    assert mean["wape"] == pytest.approx(np.mean(per_metric))
    headlines = [b["models"]["last_value"]["1"]["wape"] for b in blocks]
    assert mean["wape"] != pytest.approx(np.mean(headlines))  # what it was before
