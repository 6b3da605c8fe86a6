"""Synthetic per-pod metric files in the GenAI trace layout, for tests and demos.

Entities come in groups that share a daily-like load curve with bursts; each
metric is a noisy function of its group's load (GPU utilisation spiky and often
zero, memory smooth, request rate sparse and written only when positive, like the
real trace). A fraction of samples is dropped to exercise the masks.
"""

from __future__ import annotations

import csv
import gzip
from pathlib import Path

import numpy as np

STEP_S = 57


def write_synthetic_metrics(
    directory: Path | str,
    *,
    entities: int = 12,
    steps: int = 400,
    groups: int = 3,
    start_s: float = 1_700_000_000 - (1_700_000_000 % STEP_S),
    drop_fraction: float = 0.02,
    seed: int = 0,
) -> Path:
    """Write four metric files into ``directory`` and return it."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    t = np.arange(steps)
    load = np.stack(
        [
            0.5
            + 0.4 * np.sin(2 * np.pi * (t / (120 + 30 * g)) + g)
            + (rng.random(steps) < 0.03) * rng.uniform(0.3, 0.8, steps)
            for g in range(groups)
        ]
    ).clip(0, 1.5)
    group_of = np.arange(entities) % groups
    names = [f"10.0.{e // 250}.{e % 250}" for e in range(entities)]
    duty = np.clip(
        100 * load[group_of].T * rng.uniform(0.6, 1.0, entities)
        + rng.normal(0, 8, (steps, entities)),
        0,
        100,
    )
    duty[duty < 15] = 0.0
    gpu_memory = 2e10 + 1e10 * load[group_of].T + rng.normal(0, 2e8, (steps, entities))
    memory = np.clip(0.3 + 0.4 * load[group_of].T + rng.normal(0, 0.01, (steps, entities)), 0, 1)
    qps = np.where(rng.random((steps, entities)) < load[group_of].T * 0.4, 0.09, 0.0)
    series = {
        "pod_gpu_duty_cycle_anon.csv.gz": ("value,timestamp_anon,container_ip", duty),
        "pod_gpu_memory_used_bytes_anon.csv.gz": ("timestamp_anon,value,container_ip", gpu_memory),
        "pod_memory_util_anon.csv.gz": ("value,timestamp_anon,container_ip", memory),
    }
    for file_name, (header, values) in series.items():
        keep = rng.random(values.shape) >= drop_fraction
        with gzip.open(directory / file_name, "wt", newline="") as handle:
            writer = csv.writer(handle)
            columns = header.split(",")
            writer.writerow(columns)
            for s, e in zip(*np.nonzero(keep), strict=True):
                row = {
                    "value": f"{values[s, e]:.6g}",
                    "timestamp_anon": f"{start_s + STEP_S * s:.1f}",
                    "container_ip": names[e],
                }
                writer.writerow([row[c] for c in columns])
    with gzip.open(directory / "qps.csv.gz", "wt", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["timestamp_anon", "value", "container_ip", "request_type"])
        for s, e in zip(*np.nonzero(qps > 0), strict=True):
            writer.writerow(
                [f"{start_s + STEP_S * s:.1f}", "0.09", names[e], "Generative Requests"]
            )
        for s in range(0, steps, 3):  # gateway-level rows: no entity
            writer.writerow([f"{start_s + STEP_S * s:.1f}", "1.2", "", "API Requests"])
    return directory
