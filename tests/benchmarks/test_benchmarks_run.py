"""Every script in benchmarks/ runs at its tiny size and prints its documented JSON.

Each benchmark is run as ``make bench`` runs it (a separate process), with
``KUBESAGE_BENCH_TINY=1`` and ``--format json``; the last line of stdout must be one
JSON object with the keys the script's docstring documents. The figures are not
checked: at the tiny size they mean nothing. A benchmark added to benchmarks/
without an entry here fails ``test_every_benchmark_is_run``.

Those that need the shared traces skip without them; those that need Spark or a
real Flink cluster skip without it (under ``CI=true`` a missing Flink fails, as in
tests/adapters/flink). Spark's and Flink's start-up makes those runs slow.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.builders import shared_data_dir

BENCHMARKS_DIR = Path(__file__).resolve().parents[2] / "benchmarks"
TIMEOUT_S = 600

Check = Callable[[dict[str, Any]], None]


def keys_are(document: dict[str, Any], *expected: str) -> None:
    assert set(document) == set(expected), f"keys {sorted(document)}, documented {expected}"


def each_value_has(document: dict[str, Any], *expected: str) -> None:
    assert document, "no entries"
    for name, value in document.items():
        assert isinstance(value, dict), f"{name}: {value!r}"
        keys_are(value, *expected)


def check_allreduce(document: dict[str, Any]) -> None:
    each_value_has(
        document,
        "busbw_ours",
        "busbw_spread",
        "busbw_packed",
        "busbw_optimal",
        "busbw_ours_small",
        "ours_over_optimal_min",
    )
    assert "cpu-racks" not in document  # no GPUs: skipped, not a crash


def check_defrag(document: dict[str, Any]) -> None:
    keys_are(
        document,
        "large_task_schedulable_pct",
        "pods_migrated_pct",
        "compression_factor",
        "scenarios",
    )
    keys_are(document["large_task_schedulable_pct"], "without", "with", "with_compaction")
    keys_are(document["scenarios"], "openb_replay", "mig_mix", "openb_fgd_protocol")
    for modes in document["scenarios"].values():
        keys_are(modes, "off", "on_demand", "with_compaction")
        each_value_has(modes, "large_task_schedulable_pct", "pods_migrated_pct", "large_tasks")


def check_drtg(document: dict[str, Any]) -> None:
    keys_are(document, "update_s_1k", "update_s_10k")


def check_elastic(document: dict[str, Any]) -> None:
    keys_are(document, "1:4", "2:8")
    each_value_has(document, "freed_pct_detected", "freed_pct_oracle")


def check_extender(document: dict[str, Any]) -> None:
    keys_are(
        document,
        "nodes",
        "fgd_cold_score_ms",
        "reference",
        "targets_10000_nodes",
        "cpus",
        "load_average_1m_at_end",
        "fill",
        "server",
        "policy",
    )
    assert document["server"] in ("kubesage", "granian")
    assert document["policy"] == "fgd", "serve's default policy unless --policy is given"
    for modes in document["nodes"].values():
        keys_are(modes, "default", "all")
        each_value_has(
            modes,
            "names_per_request",
            "pods",
            "unschedulable",
            "p50_ms",
            "p99_ms",
            "max_ms",
            "pods_per_s",
            "server_filter_mean_ms",
            "server_prioritize_mean_ms",
            "bind_p50_ms",
            "loop_ticks",
            "loop_tick_mean_ms",
            "client_json_mean_ms",
            "round_trip_floor_p50_ms",
        )
    for shapes in document["fgd_cold_score_ms"].values():
        keys_are(shapes, "cpu-only", "half-gpu", "one-gpu", "eight-gpu")


def check_packing_bounds(document: dict[str, Any]) -> None:
    keys_are(document, "seeds", "traces", "wall_s")
    each_value_has(
        document["traces"],
        "fgd",
        "hindsight",
        "upper_bound",
        "ppo",
        "hindsight_minus_fgd",
        "headroom_captured",
        "online",
        "online_captured",
        "online_policies",
        "bound",
        "throughout",
        "what_changed",
        "per_seed",
    )
    for entry in document["traces"].values():
        assert entry["fgd"] <= entry["hindsight"] <= entry["upper_bound"] <= 100.0
        assert 0.0 < entry["online"] <= entry["upper_bound"]


def check_loop_scale(document: dict[str, Any]) -> None:
    keys_are(document, "nodes", "ticks", "bound_pods")
    for by_setting in document["bound_pods"].values():
        each_value_has(
            by_setting, "tick_p50_ms", "gc_ms_per_tick", "gc_max_pause_ms", "full_collections"
        )
        keys_are(by_setting, "kubesage", "python-default")


def check_openb_variants(document: dict[str, Any]) -> None:
    keys_are(
        document,
        "variants",
        "mean",
        "ppo_at_least_fgd",
        "ppo_below_fgd_beyond_2se",
        "ppo_qualified_at_least_fgd",  # the tiny run qualifies ppo on 2 orders
        "model",
        "seeds",
        "generator_seed",
        "wall_s",
    )
    for entry in document["variants"].values():
        for key in ("fgd", "bestfit", "ppo", "published_fgd", "published_bestfit"):
            assert key in entry, key
        assert entry["ppo_minus_fgd"] == pytest.approx(entry["ppo"] - entry["fgd"], abs=1e-3)
        assert entry["ppo_minus_fgd_se"] is None  # one seed: no spread to measure
        assert isinstance(entry["trained_on"], bool)
        assert entry["source"] == "generated"
        verdict = entry["qualification"]
        assert len(verdict["gains"]) == 2
        assert entry["ppo_qualified"] == entry[verdict["chosen"]]
    assert document["ppo_below_fgd_beyond_2se"] is None
    keys_are(document["model"], "file", "trained_on")


def check_fgd_reproduction(document: dict[str, Any]) -> None:
    keys_are(document, "seeds", "traces")
    for policies in document["traces"].values():
        each_value_has(
            policies,
            "ours_at_100",
            "ours_at_130",
            "published_at_100",
            "published_at_130",
            "delta_at_130",
        )


def check_flink_autoscale(document: dict[str, Any]) -> None:
    documented = {
        "rate",
        "capacity",
        "rescales",
        "first_decision_s",
        "first_decision_after_valid_s",
        "converged_s",
        "final_parallelism",
        "ideal_parallelism",
        "backpressure_after",
        "source_backpressured_ms_per_s_after",
        "slow_busy_ms_per_s_after",
    }
    operator = {
        "operator_first_decision_s",
        "operator_parallelism",
        "operator_lag_at_decision",
        "operator_true_rate",
    }
    # The operator's computed decision needs a valid window before the first rescale.
    assert set(document) in (documented, documented | operator), sorted(document)


def check_flink_stagger(document: dict[str, Any]) -> None:
    keys_are(
        document,
        "jobs",
        "periods",
        "interval_ms",
        "peak_concurrent_with",
        "peak_concurrent_without",
        "optimum",
        "state_mb",
        "fs_counter",
        *with_and_without(
            "peak_write_bytes_per_s",
            "peak_write_bytes_per_s_1s",
            "p95_duration_ms",
            "fs_peak_write_bytes_per_s",
        ),
        "scenarios",
    )
    keys_are(document["scenarios"], "roomy", "tight")
    each_value_has(
        document["scenarios"],
        "interval_ms",
        "durations_ms",
        "phases_ms",
        "peak_concurrent_with",
        "peak_concurrent_without",
        "optimum",
        "plan_optimum",
        "completed_with",
        "completed_without",
        "failed",
        *with_and_without(
            "peak_write_bytes_per_s",
            "peak_write_bytes_per_s_1s",
            "p95_duration_ms",
            "written_bytes",
            "fs_peak_write_bytes_per_s",
            "fs_written_bytes",
        ),
    )
    for figures in document["scenarios"].values():
        # Every completed checkpoint wrote something, and the file system saw it.
        assert figures["written_bytes_without"] > 0, figures
        assert figures["peak_write_bytes_per_s_without"] > 0, figures
        assert figures["fs_written_bytes_without"] > 0, figures


def with_and_without(*keys: str) -> list[str]:
    return [f"{key}_{run}" for key in keys for run in ("with", "without")]


def check_forecast(document: dict[str, Any]) -> None:
    keys_are(
        document,
        *("train_until", "data_start", "test_until", "test_steps", "entities", "metrics"),
        *("graph", "models", "train_seconds", "rolling", "blocks"),
        *(["notes"] if "notes" in document else []),
    )
    # The tiny run scores q = 0.9 as well: a second fit per model, timed as "<model>@q".
    models = set(document["models"])
    assert set(document["train_seconds"]) == models | {f"{name}@q" for name in models}
    assert len(document["blocks"]) == document["rolling"]
    for horizons in document["models"].values():
        keys_are(horizons, "1", "5", "15")
        each_value_has(
            horizons, "wape", "mape_nonzero", "smape", "per_metric", "burst", "quantiles"
        )
        for entry in horizons.values():
            keys_are(entry["quantiles"], "0.9")
            keys_are(entry["quantiles"]["0.9"], "wql", "coverage", "per_metric")
            assert 0.0 <= entry["quantiles"]["0.9"]["coverage"] <= 1.0


def check_forecast_gateway(document: dict[str, Any]) -> None:
    keys_are(document, "train_until_step", "test_steps", "gateway_rows", "horizons")
    assert document["gateway_rows"] > 0  # the trace's gateway rows were read
    assert document["test_steps"] > 0
    for entry in document["horizons"].values():
        keys_are(entry, "per_metric", "headline")
        each_value_has(entry["per_metric"], "own", "with_gateway", "last_value")
        for row in entry["per_metric"].values():
            assert all(value is None or value >= 0 for value in row.values()), row


def check_forecast_placement(document: dict[str, Any]) -> None:
    # The tiny run adds a trained ST-GCN and its upper quantile (--learned): the replay
    # starts after their training.
    keys_are(
        document,
        "baseline",
        "variants",
        "nodes",
        "load",
        "lifetime_steps",
        "seeds",
        "learned",
        "replay_steps",
        "train_seconds",
    )
    keys_are(document["baseline"], "contended", "overload", "rejected", "arrivals")
    learned = ["stgcn", "stgcn-q0.9"]
    assert document["learned"] == learned and set(document["train_seconds"]) == set(learned)
    forecasts = {name.split("@")[0] for name in document["variants"]}
    assert forecasts == {"last", "mean15", "oracle", "stgcn", "stgcn-q0.9"}
    each_value_has(document["variants"], "contended", "overload", "rejected", "arrivals")
    first, end = document["replay_steps"]
    assert 0 < first < end


def check_forecast_refresh(document: dict[str, Any]) -> None:
    keys_are(document, "history", "horizon", "ticks", "train_steps", "nodes")
    each_value_has(
        document["nodes"],
        "last_value_ms",
        "model_ms",
        "series",
        "fit_seconds",
        "train_windows",
        "windows_available",
        "peak_rss_mib",
    )
    for nodes, entry in document["nodes"].items():
        assert entry["series"] == 8 * int(nodes)  # every GPU column of every node answered
        assert entry["model_ms"] > 0 and entry["last_value_ms"] >= 0
        assert 0 < entry["train_windows"] <= entry["windows_available"]
        assert entry["peak_rss_mib"] > 0


def check_forecast_packing(document: dict[str, Any]) -> None:
    keys_are(
        document,
        "policies",
        "train_hours",
        "replay_hours",
        "interval_steps",
        "quantile",
        "scale",
        "gpu_memory_gib",
        "pods",
        "decisions",
        "rolling",
        "blocks",
        "train_seconds",
        "data",
        *(["notes"] if "notes" in document else []),
        "quantile_sweep",  # the tiny run sweeps two quantiles
    )
    # The tiny run retrains before each of two blocks, which together are the replay.
    assert document["rolling"] == 2 == len(document["blocks"])
    first, second = document["blocks"]
    assert first["train_hours"][1] == document["replay_hours"][0] == first["replay_hours"][0]
    assert first["replay_hours"][1] == second["replay_hours"][0] == second["train_hours"][1]
    assert second["replay_hours"][1] == document["replay_hours"][1]
    assert first["decisions"] + second["decisions"] == document["decisions"]
    assert set(document["quantile_sweep"]) == {"0.9", "0.95"}
    for at_quantile in document["quantile_sweep"].values():
        assert set(at_quantile) == {"stgcn", "lstm", "last_value", "moving_median"}
        each_value_has(at_quantile, "gpu_hours", "overload_minutes")
    # Recalibrated at the run's own quantile, each forecaster packs exactly as trained.
    assert document["quantile"] == 0.95
    for name, swept in document["quantile_sweep"]["0.95"].items():
        policy = document["policies"][name]
        assert swept == {k: policy[k] for k in ("gpu_hours", "overload_minutes")}, name
    assert {
        "one_per_pod",
        "history_peak",
        "stgcn",
        "lstm",
        "last_value",
        "moving_median",
        "oracle",
    } <= set(document["policies"])
    each_value_has(
        document["policies"],
        "gpu_hours",
        "overload_minutes",
        "migrations_per_pod_hour",
        "distance_to_oracle",
    )
    assert document["policies"]["oracle"]["overload_minutes"] == 0  # the bound, at any size


def check_placement_speed(document: dict[str, Any]) -> None:
    keys_are(document, "placements_per_s", "repeats", "arrivals")
    clusters = document["placements_per_s"]
    assert "openb-1213" in clusters and len(clusters) == 2, sorted(clusters)
    for rates in clusters.values():
        assert {"fgd", "random", "ppo"} <= set(rates)


def check_ppo(document: dict[str, Any]) -> None:
    keys_are(document, "alloc_at_130", "latency_ms_p50_10k", "latency_ms_p99_10k", "steps_per_s")
    each_value_has(document["alloc_at_130"], "ppo", "fgd")
    keys_are(document["steps_per_s"], "1", "2")


def check_soak(document: dict[str, Any]) -> None:
    keys_are(
        document,
        "minutes",
        "rss_mib_start",
        "rss_mib_end",
        "p99_ms_by_minute",
        "status_counts",
        "valid_requests_5xx",
        "rss_mib_by_minute",
        "rss_noise_pct",
        "pods_by_minute",
        "malformed",
        "churn",
        "nodes",
        "checks",
        "cpus",
        "load_average_1m_by_minute",
        "memory",
    )
    keys_are(document["checks"], *SOAK_CHECKS)
    # without --trace-memory: no traced figures
    keys_are(document["memory"], "loop_shapes_warmed", "malloc_mib_by_minute")
    keys_are(document["malformed"], "bad_json", "wrong_types", "huge_header", "cut_body")
    assert document["valid_requests_5xx"] == 0  # a 5xx on a valid request is a bug at any size


SOAK_CHECKS = ("rss_end_within_10pct_of_start", "no_5xx_on_valid", "p99_worst_within_3x_best")


def check_spark_locality(document: dict[str, Any]) -> None:
    each_value_has(
        document, "cross_rack_bytes", "ours_over_spread_median", "ours_over_spread_worst"
    )
    for entry in document.values():
        keys_are(entry["cross_rack_bytes"], "ours", "spread", "random")


@dataclass(frozen=True)
class Benchmark:
    check: Check
    needs: tuple[str, ...] = ()
    """``openb``/``genai`` (shared traces), ``spark``, ``flink``."""
    marks: tuple[pytest.MarkDecorator, ...] = field(default=())


SLOW = (pytest.mark.slow,)
BENCHMARKS = {
    "allreduce": Benchmark(check_allreduce),
    "defrag": Benchmark(check_defrag, needs=("openb",)),
    "drtg": Benchmark(check_drtg),
    "elastic": Benchmark(check_elastic),
    "extender": Benchmark(check_extender),
    "fgd_reproduction": Benchmark(check_fgd_reproduction, needs=("openb",)),
    "flink_autoscale": Benchmark(check_flink_autoscale, needs=("flink",), marks=SLOW),
    "flink_stagger": Benchmark(check_flink_stagger, needs=("flink",), marks=SLOW),
    "forecast": Benchmark(check_forecast, needs=("genai",)),
    "forecast_gateway": Benchmark(check_forecast_gateway, needs=("genai",)),
    "loop_scale": Benchmark(check_loop_scale),
    # Without the GenAI trace it replays synthetic metrics: it needs nothing.
    "forecast_placement": Benchmark(check_forecast_placement),
    "forecast_packing": Benchmark(check_forecast_packing),  # synthetic without the trace
    "forecast_refresh": Benchmark(check_forecast_refresh),
    "openb_variants": Benchmark(check_openb_variants, needs=("openb",)),
    "packing_bounds": Benchmark(check_packing_bounds, needs=("openb",)),
    "placement_speed": Benchmark(check_placement_speed, needs=("openb",)),
    "ppo": Benchmark(check_ppo, needs=("openb",), marks=SLOW),  # Ray start-up
    "soak": Benchmark(check_soak),
    "spark_locality": Benchmark(check_spark_locality, needs=("spark",), marks=SLOW),
}


def test_every_benchmark_is_run() -> None:
    # Scripts are the top-level modules; _common and flink_support/ are their helpers.
    scripts = {p.stem for p in BENCHMARKS_DIR.glob("*.py") if not p.name.startswith("_")}
    assert scripts == set(BENCHMARKS)


def _require(needs: tuple[str, ...]) -> dict[str, str]:
    """Skip unless what the benchmark needs is here; extra environment for it."""
    env: dict[str, str] = {}
    traces = [need for need in needs if need in ("openb", "genai")]
    if traces:
        root = shared_data_dir()
        missing = [t for t in traces if root is None or not (root / t).is_dir()]
        if missing or root is None:
            pytest.skip(
                f"shared trace(s) {', '.join(missing)} not found: set KUBESAGE_SHARED_DATA "
                "or place them in ../shared/data beside the repository"
            )
        env["KUBESAGE_SHARED_DATA"] = str(root)
    if "spark" in needs:
        from kubesage.adapters.spark.cli import find_spark_submit
        from kubesage.core.errors import InputError

        try:
            find_spark_submit()
        except InputError as exc:
            pytest.skip(str(exc))
    if "flink" in needs:
        from tests.services import require_flink

        require_flink()
    return env


@pytest.mark.parametrize(
    "name",
    [pytest.param(name, marks=spec.marks, id=name) for name, spec in BENCHMARKS.items()],
)
def test_benchmark_runs_at_tiny_size(name: str, tmp_path: Path) -> None:
    spec = BENCHMARKS[name]
    env = {**os.environ, **_require(spec.needs), "KUBESAGE_BENCH_TINY": "1"}
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS_DIR / f"{name}.py"), "--format", "json"],
        cwd=tmp_path,  # nothing a benchmark writes lands in the checkout
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert lines, f"no output; stderr:\n{done.stderr[-3000:]}"
    document = json.loads(lines[-1])
    assert isinstance(document, dict), lines[-1][:300]
    spec.check(document)


def run_json(
    tmp_path: Path, script: str, *arguments: str, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Run a benchmark with ``--format json`` in ``tmp_path``; its last line, parsed."""
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS_DIR / script), *arguments, "--format", "json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    document: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return document


def test_openb_variants_runs_the_traces_own_pod_list_where_given(tmp_path: Path) -> None:
    """``--variants-dir``: a variant whose pod list is there is read, not generated."""
    env = {**os.environ, **_require(("openb",)), "KUBESAGE_BENCH_TINY": "1"}
    root = shared_data_dir()
    assert root is not None
    own = tmp_path / "variants"
    own.mkdir()
    # Any openb pod list stands in for the trace's gpushare60, gzipped as a cache may
    # hold it. cpu0, one of the trace's names the paper published nothing for, comes
    # first: the columns and means must still hold the published comparison.
    stand_in = root / "openb" / "openb_pod_list_gpushare40.csv"
    with gzip.open(own / "openb_pod_list_gpushare60.csv.gz", "wb") as handle:
        handle.write(stand_in.read_bytes())
    document = run_json(
        tmp_path,
        "openb_variants.py",
        *("--policies", "fgd", "--variants", "cpu0,gpushare60", "--variants-dir", str(own)),
        env=env,
    )
    variants = document["variants"]
    assert variants["gpushare60"]["source"] == "trace"
    assert variants["cpu0"]["source"] == "generated"
    assert variants["cpu0"]["published_fgd"] is None
    assert variants["cpu0"]["fgd_minus_published"] is None
    mean = document["mean"]
    assert mean["fgd_minus_published"] == variants["gpushare60"]["fgd_minus_published"]
    assert mean["fgd"] == round((variants["cpu0"]["fgd"] + variants["gpushare60"]["fgd"]) / 2, 3)


def test_openb_variants_pairs_the_seeds_for_the_standard_error(tmp_path: Path) -> None:
    """``ppo_minus_fgd_se`` over two seeds is the spread of the two seeds' own gains,
    each measured by a run of its own: |g₁ − g₂| / 2 for a pair."""
    env = {**os.environ, **_require(("openb",)), "KUBESAGE_BENCH_TINY": "1"}
    arguments = ("--policies", "fgd,ppo", "--variants", "gpushare60")

    def gain(seeds: str) -> dict[str, Any]:
        document = run_json(tmp_path, "openb_variants.py", *arguments, "--seeds", seeds, env=env)
        entry: dict[str, Any] = document["variants"]["gpushare60"]
        entry["below"] = document["ppo_below_fgd_beyond_2se"]
        return entry

    first, second, both = gain("42"), gain("43"), gain("42,43")
    assert first["ppo_minus_fgd_se"] is None and first["below"] is None
    expected = abs(first["ppo_minus_fgd"] - second["ppo_minus_fgd"]) / 2
    assert both["ppo_minus_fgd_se"] == pytest.approx(expected, abs=2e-3)
    assert both["below"] == int(both["ppo_minus_fgd"] < -2 * both["ppo_minus_fgd_se"])


def test_extender_benchmark_serves_through_granian(tmp_path: Path) -> None:
    """``--server granian``: the same App behind granian answers every request the
    benchmark's client sends (a non-200 ends the run) and the JSON says which server."""
    document = run_json(tmp_path, "extender.py", "--tiny", "--server", "granian")
    check_extender(document)
    assert document["server"] == "granian"
    assert all(mode["pods"] > 0 for modes in document["nodes"].values() for mode in modes.values())


def _elastic(*arguments: str, tiny_env: str = "") -> str:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS_DIR / "elastic.py"), *arguments],
        env={**os.environ, "KUBESAGE_BENCH_TINY": tiny_env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout


@pytest.mark.parametrize(
    ("arguments", "tiny_env", "jobs"),
    [
        (["--tiny"], "", 2),  # the flag: the tiny default
        ([], "1", 2),  # the environment variable: the same
        (["--tiny", "--jobs", "3"], "", 3),  # an explicit option wins over the tiny default
    ],
)
def test_tiny_size_convention(arguments: list[str], tiny_env: str, jobs: int) -> None:
    assert f"median of {jobs} generated" in _elastic(*arguments, tiny_env=tiny_env)


def test_help_documents_the_tiny_size() -> None:
    assert "KUBESAGE_BENCH_TINY=1" in _elastic("--help")
