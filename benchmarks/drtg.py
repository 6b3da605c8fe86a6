"""DRTG telemetry update time at 1,000 and 10,000 nodes (target: ≤ 0.5 s at 10,000).

One update is a telemetry round: a traffic sample on every edge of the graph (every
PCIe, NVLink, NIC and uplink edge) recorded at one timestamp, weights and cached
GPU bandwidths recomputed. Median of repeated rounds at successive timestamps, so
sliding-window buckets expire as they would live.

JSON: ``{"update_s_1k", "update_s_10k"}`` (seconds). ``--tiny``: one round each.

    python benchmarks/drtg.py [--repeats 5] [--tiny] [--format table|json]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from _common import format_table, json_line, parse_args, positive_int, run_main

from kubesage.core.config import parse_config
from kubesage.core.topology.graph import DRTG
from kubesage.core.topology.indicators import Indicator
from kubesage.core.topology.spec import TOPOLOGY_KIND, TopologySpec

NODES_PER_RACK = 32
RACKS_PER_ZONE = 16
TINY = {"repeats": 1}


def topology(nodes: int) -> TopologySpec:
    racks = nodes // NODES_PER_RACK
    zones = max(1, racks // RACKS_PER_ZONE)
    document = {
        "apiVersion": "kubesage.io/v1alpha1",
        "kind": TOPOLOGY_KIND,
        "spec": {
            "node_templates": {
                "dgx": {
                    "gpu_model": "H100-80GB",
                    "gpus": 8,
                    "sockets": 2,
                    "gpus_per_switch": 2,
                    "pcie_generation": 5,
                    "nic_gbps_per_switch": 400,
                    "nvlink": {"topology": "nvswitch", "generation": 4, "links_per_gpu": 18},
                },
            },
            "zones": [{"name": f"z{z}", "uplink_gbps": 25_600} for z in range(zones)],
            "racks": [
                {
                    "name": f"r{r}",
                    "zone": f"z{r % zones}",
                    "uplink_gbps": 12_800,
                    "template": "dgx",
                    "nodes": NODES_PER_RACK,
                }
                for r in range(racks)
            ],
        },
    }
    return parse_config(document, TopologySpec, kind=TOPOLOGY_KIND)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=positive_int, default=5)
    parser.add_argument("--format", choices=["table", "json"], default="table")
    args = parse_args(parser, TINY)
    rng = np.random.default_rng(0)
    results = {}
    rows = []
    for nodes in (1_000, 10_000):
        started = time.perf_counter()
        drtg = DRTG(topology(nodes - nodes % NODES_PER_RACK or NODES_PER_RACK))
        build_s = time.perf_counter() - started
        edges = np.arange(drtg.num_edges)
        times = []
        for round_ in range(args.repeats):
            samples = rng.uniform(0.0, 5.0, edges.size)
            started = time.perf_counter()
            drtg.observe(edges, Indicator.TRAFFIC_GBPS, samples, timestamp_s=float(round_))
            times.append(time.perf_counter() - started)
        key = "update_s_1k" if nodes == 1_000 else "update_s_10k"
        results[key] = statistics.median(times)
        rows.append([f"{drtg.num_nodes:,}", f"{drtg.num_edges:,}", build_s, results[key], 0.5])
    if args.format == "json":
        print(json_line({k: round(v, 4) for k, v in results.items()}))
        return 0
    print(f"DRTG telemetry round: one sample on every edge (median of {args.repeats})")
    print(format_table(["nodes", "edges", "build s", "update s", "target s"], rows, digits=3))
    return 0


if __name__ == "__main__":
    run_main(main)
