"""Elastic scaling through validation phases: GPU time freed on generated training jobs.

Each job alternates training epochs (30–90 min at 85–98 % GPU utilisation) with
validation (3–20 min at 20–50 %), sampled every 10 s with noise and spikes; runs
on torchrun with ``--nnodes=MIN:MAX`` (8 GPUs per node). Phases are detected from
the utilisation alone, and the plan's freed GPU time (restart costs subtracted)
is compared with what perfect knowledge of the phases would free.

JSON: ``{"<min>:<max>": {"freed_pct_detected", "freed_pct_oracle"}}`` for ``1:4``
and ``2:8``. ``--tiny``: two jobs.

    python benchmarks/elastic.py [--jobs 50] [--tiny] [--format table|json]
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np
from _common import format_table, json_line, parse_args, positive_int, run_main

from kubesage.adapters.gpu_training.elastic import Segment, detect_phases, scale_plan

STEP_S = 10.0
TINY = {"jobs": 2}


def generate(rng: np.random.Generator, hours: float = 8.0) -> tuple[np.ndarray, list[Segment]]:
    values: list[np.ndarray] = []
    truth: list[Segment] = []
    t = 0.0
    while t < hours * 3600:
        for phase, low, high, minutes in (
            ("train", 85, 98, (30, 90)),
            ("validation", 20, 50, (3, 20)),
        ):
            samples = int(rng.uniform(*minutes) * 60 / STEP_S)
            level = rng.uniform(low, high)
            part = np.clip(level + rng.normal(0, 5, samples), 0, 100)
            spikes = rng.random(samples) < 0.02
            part[spikes] = rng.uniform(0, 100, spikes.sum())
            values.append(part)
            truth.append(Segment(phase, t, t + samples * STEP_S))  # type: ignore[arg-type]
            t += samples * STEP_S
    return np.concatenate(values), truth


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=positive_int, default=50)
    parser.add_argument("--format", choices=["table", "json"], default="table")
    args = parse_args(parser, TINY)
    rng = np.random.default_rng(0)
    rows = []
    document = {}
    for min_nodes, max_nodes in ((1, 4), (2, 8)):
        detected, ideal = [], []
        for _ in range(args.jobs):
            utilisation, truth = generate(rng)
            plan = scale_plan(
                detect_phases(utilisation),
                min_nodes=min_nodes,
                max_nodes=max_nodes,
                gpus_per_node=8,
            )
            perfect = scale_plan(truth, min_nodes=min_nodes, max_nodes=max_nodes, gpus_per_node=8)
            detected.append(plan.freed_fraction)
            ideal.append(perfect.freed_fraction)
        key = f"{min_nodes}:{max_nodes}"
        document[key] = {
            "freed_pct_detected": round(100 * statistics.median(detected), 2),
            "freed_pct_oracle": round(100 * statistics.median(ideal), 2),
        }
        rows.append([key, document[key]["freed_pct_detected"], document[key]["freed_pct_oracle"]])
    if args.format == "json":
        print(json_line(document))
        return 0
    print(
        f"GPU time freed by elastic scaling through validation (% of the job's GPU time, "
        f"median of {args.jobs} generated 8-hour jobs)"
    )
    print(format_table(["nnodes", "phases detected", "phases known (oracle)"], rows))
    return 0


if __name__ == "__main__":
    run_main(main)
