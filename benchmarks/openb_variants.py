"""The FGD paper's openb variants, generated: our FGD and BestFit beside the published
figures, and the learned ppo policy beside FGD on workloads it may never have seen.

The shared data holds five of the paper's 17 workloads; the other twelve are in the
public repository only (``kubesage data fetch openb-variants``, with ``--variants-dir``
below). ``core/traces/openb_variants.py`` generates every variant
from ``default`` (``gpuspec`` draws its GPU-model constraints from the shipped
``gpuspec20`` list when it is present). Two questions, one run:

- **Is the generator right?** FGD and BestFit on each generated variant, under the
  paper's protocol (130 % of GPU capacity requested, arrivals only), beside the
  published means (``published_allocation_ratio.csv``): ``fgd_minus_published``.
- **Does the learned policy hold on workloads it was not trained on?** ppo (``--model``,
  default the shipped one) beside FGD on the same runs: ``ppo_minus_fgd``, with its
  standard error over the seeds, paired seed by seed (``ppo_minus_fgd_se``): a gap
  within about two of them is the spread of arrival orders, not the policy. The model's
  own record of what it was trained on (pod lists and variants) is printed, and each
  variant is marked ``trained_on`` when the model saw it.

Allocation % at 130 % arrived, mean over ``--seeds`` (default 42–44), generator seed
``--generator-seed`` (default 0).

``--variants-dir DIR`` runs the trace's own pod list of a variant wherever DIR holds
``openb_pod_list_<variant>.csv`` or ``.csv.gz`` (``kubesage data fetch openb-variants``
puts the public repository's ones in the cache), and generates the others; each
variant's ``source`` says which (``trace`` or ``generated``). Seven of the trace's lists
(``cpu0``, ``gpushare20``, …) have no published figure: their ``published_*`` and
``*_minus_published`` are null, and each mean is over the variants that have the figure.

``--qualify RUNS`` adds a third question: **would qualifying ppo per workload keep it
from losing?** Before the measured runs, ppo is qualified against FGD on each variant
by replaying RUNS arrival orders of its own (``core/sim/qualification.py``, seeds from
10,000 on, never the measured ones); ``ppo_qualified`` is then ppo's figure where it
qualified and FGD's where it did not, and ``qualification`` holds the verdict.

JSON: ``{"variants": {"<name>": {"fgd", "bestfit", "ppo", "published_fgd",
"published_bestfit", "fgd_minus_published", "bestfit_minus_published", "ppo_minus_fgd",
"ppo_minus_fgd_se", "trained_on", "source"}}, "mean": {the same figures over the variants,
but the standard error}, "ppo_at_least_fgd", "ppo_below_fgd_beyond_2se", "model": {"file",
"trained_on"}, "seeds", "generator_seed", "wall_s"}``; a policy left out with
``--policies`` is absent from each variant (``ppo_at_least_fgd`` and
``ppo_below_fgd_beyond_2se`` are then null; the standard error and the count are null
with one seed). With ``--qualify``, each variant also has ``ppo_qualified``,
``ppo_qualified_minus_fgd`` and ``qualification`` (the verdict's record: gains per order,
mean, standard error, lower bound, chosen), and the document
``ppo_qualified_at_least_fgd``. ``--tiny``: one variant, one seed,
the first 100 nodes, qualification on 2 orders (figures meaningless).

    python benchmarks/openb_variants.py [--variants cpu100,gpushare80,...] [--seeds 42-44]
                                        [--policies fgd,bestfit,ppo] [--model FILE]
                                        [--generator-seed 0] [--jobs N] [--format json]
                                        [--qualify RUNS] [--variants-dir DIR]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from _common import (
    PUBLISHED_NAMES,
    format_table,
    json_line,
    parse_args,
    published_allocation,
    run_main,
    trace_dir,
)

from kubesage.core.rl.persistence import load_network
from kubesage.core.rl.policy import default_model
from kubesage.core.sim.qualification import judge, paired_gains, qualify
from kubesage.core.sim.runner import RunResult, RunSpec, default_jobs, run_many
from kubesage.core.sim.settings import parse_seeds
from kubesage.core.traces import read_nodes, read_pods
from kubesage.core.traces.openb_variants import (
    PUBLISHED_VARIANTS,
    gpus_per_model,
    openb_variant,
)

POLICIES = ("fgd", "bestfit", "ppo")
PUBLISHED_POLICIES = ("fgd", "bestfit")
TINY = {"seeds": "42", "variants": "gpushare60", "node_limit": 100, "qualify": 2}


def mean_allocation(results: list[RunResult], policy: str) -> float:
    """The policy's mean allocation % at 130 % arrived over its runs."""
    values = [r.alloc_at_130 for r in results if r.policy == policy and r.alloc_at_130 is not None]
    return round(statistics.fmean(values), 3)


def paired_error(results: list[RunResult]) -> float | None:
    """The standard error of ppo − FGD over the seeds, paired seed by seed (None with
    one seed): how far the mean gain could move with other arrival orders."""
    seeds, gains = paired_gains(results, "ppo", "fgd")
    if len(gains) < 2:
        return None
    return round(judge("ppo", "fgd", seeds, gains, z=2.0).standard_error, 3)


def trained_on(model: Path) -> list[str]:
    """What the model's training record says it saw: pod list stems and variants."""
    _, info = load_network(model)
    stems = [Path(name).stem.removeprefix("openb_pod_list_") for name in info.get("pods", [])]
    return stems + list(info.get("variants", []))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--variants", default=",".join(PUBLISHED_VARIANTS))
    parser.add_argument(
        "--variants-dir",
        type=Path,
        help="A folder of the trace's own variant pod lists, read instead of generating them.",
    )
    parser.add_argument("--seeds", default="42-44")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--model", type=Path, default=default_model())
    parser.add_argument("--generator-seed", type=int, default=0)
    parser.add_argument("--node-limit", type=int, default=0, help="First N nodes (0: all).")
    parser.add_argument("--jobs", type=int, default=default_jobs())
    parser.add_argument("--format", choices=["table", "json"], default="table")
    parser.add_argument(
        "--qualify",
        type=int,
        default=0,
        metavar="RUNS",
        help="Also qualify ppo against FGD on each variant by replaying RUNS arrival "
        "orders of its own (core/sim/qualification.py): ppo_qualified (0: off).",
    )
    args = parse_args(parser, TINY)
    policies = [p for p in args.policies.split(",") if p]
    unknown = sorted(set(policies) - set(POLICIES))
    if unknown:
        parser.error(
            f"--policies: unknown {', '.join(unknown)} (choose from {', '.join(POLICIES)})"
        )
    openb = trace_dir(args.data_dir, "openb")
    seeds = list(parse_seeds(args.seeds))
    nodes = read_nodes(openb / "openb_node_list_gpu_node.csv")
    models = gpus_per_model(nodes)
    if args.node_limit:
        nodes = nodes[: args.node_limit]
    base = read_pods(openb / "openb_pod_list_default.csv")
    spec_file = openb / "openb_pod_list_gpuspec20.csv"
    specs = read_pods(spec_file) if spec_file.is_file() else []
    reference = published_allocation(openb)
    seen = trained_on(args.model) if "ppo" in policies else []
    document: dict[str, dict[str, Any]] = {}
    started = time.perf_counter()
    if args.variants_dir is not None and not args.variants_dir.is_dir():
        parser.error(f"--variants-dir: {args.variants_dir} is not a directory")
    for name in [v for v in args.variants.split(",") if v]:
        lists = (
            [args.variants_dir / f"openb_pod_list_{name}{suffix}" for suffix in (".csv", ".csv.gz")]
            if args.variants_dir
            else []
        )
        own = next((path for path in lists if path.is_file()), None)
        if own is not None:
            pods, source = read_pods(own), "trace"
        else:
            pods = openb_variant(base, name, seed=args.generator_seed, specs=specs, models=models)
            source = "generated"
        runs = [
            RunSpec(p, s, model=args.model if p == "ppo" else None) for p in policies for s in seeds
        ]
        print(f"{name}: {len(runs)} runs...", file=sys.stderr, flush=True)
        results = run_many(runs, nodes, pods, jobs=args.jobs)
        figures: dict[str, Any] = {p: mean_allocation(results, p) for p in policies}
        for policy in PUBLISHED_POLICIES:
            paper = reference.get((name, PUBLISHED_NAMES[policy]), (None, None))[1]
            figures[f"published_{policy}"] = paper
            if policy in figures:  # null where the paper has no figure for the variant
                figures[f"{policy}_minus_published"] = (
                    None if paper is None else round(figures[policy] - paper, 3)
                )
        if "ppo" in figures and "fgd" in figures:
            figures["ppo_minus_fgd"] = round(figures["ppo"] - figures["fgd"], 3)
            figures["ppo_minus_fgd_se"] = paired_error(results)
            if args.qualify:
                verdict = qualify(nodes, pods, runs=args.qualify, model=args.model, jobs=args.jobs)
                figures["ppo_qualified"] = figures[verdict.chosen]
                figures["ppo_qualified_minus_fgd"] = round(
                    figures["ppo_qualified"] - figures["fgd"], 3
                )
                figures["qualification"] = verdict.as_dict()
                print(
                    f"{name}: qualification gain {verdict.mean_gain:+.3f} "
                    f"± {verdict.standard_error:.3f} → {verdict.chosen}",
                    file=sys.stderr,
                    flush=True,
                )
            figures["trained_on"] = name in seen
        figures["source"] = source
        document[name] = figures
    wall_s = round(time.perf_counter() - started, 1)
    keys = [  # every variant's keys, in order of first appearance
        k
        for k in dict.fromkeys(k for figures in document.values() for k in figures)
        if k not in ("trained_on", "qualification", "source", "ppo_minus_fgd_se")
    ]
    mean = {
        k: round(statistics.fmean(v[k] for v in document.values() if v.get(k) is not None), 3)
        for k in keys
        if any(v.get(k) is not None for v in document.values())
    }
    compared = [v["ppo_minus_fgd"] for v in document.values() if "ppo_minus_fgd" in v]
    # null, not 0, when no variant compared ppo with fgd (--policies without one of them)
    at_least = sum(gain >= 0 for gain in compared) if compared else None
    # below FGD by more than two paired standard errors: a loss the arrival orders'
    # spread does not explain (null where there is no comparison or one seed)
    errors = [
        (v["ppo_minus_fgd"], v["ppo_minus_fgd_se"])
        for v in document.values()
        if v.get("ppo_minus_fgd_se") is not None
    ]
    clearly_below = sum(gain < -2 * se for gain, se in errors) if errors else None
    qualified_at_least = sum(
        v["ppo_qualified_minus_fgd"] >= 0
        for v in document.values()
        if "ppo_qualified_minus_fgd" in v
    )
    if args.format == "json":
        print(
            json_line(
                {
                    "variants": document,
                    "mean": mean,
                    "ppo_at_least_fgd": at_least,
                    "ppo_below_fgd_beyond_2se": clearly_below,
                    **({"ppo_qualified_at_least_fgd": qualified_at_least} if args.qualify else {}),
                    "model": {"file": args.model.name, "trained_on": seen},
                    "seeds": seeds,
                    "generator_seed": args.generator_seed,
                    "wall_s": wall_s,
                },
            )
        )
        return 0
    sources = sorted({v["source"] for v in document.values()})
    print(
        f"GPU allocation at 130 % arrived (%), {' and '.join(sources)} variants, mean over "
        f"seeds {args.seeds}"
    )
    if seen:
        print(f"model {args.model.name} was trained on: {', '.join(seen)}")
    columns = [k for k in keys if not k.startswith("published_")]
    rows: list[list[object]] = [
        [
            name
            + (" (trace's)" if v["source"] == "trace" else "")
            + (" (trained on)" if v.get("trained_on") else ""),
            *(v.get(k) for k in columns),
        ]
        for name, v in document.items()
    ]
    rows.append(["mean", *(mean.get(k) for k in columns)])
    print(format_table(["variant", *columns], rows))
    if "ppo_minus_fgd" in mean:
        print(f"ppo ≥ FGD on {at_least} of {len(document)} variants")
        if clearly_below is not None:
            print(
                f"ppo below FGD by more than two paired standard errors on {clearly_below} "
                f"of {len(errors)}"
            )
    if args.qualify and "ppo_minus_fgd" in mean:
        chosen = [n for n, v in document.items() if v["qualification"]["qualified"]]
        print(
            f"ppo qualified on {len(chosen)} of {len(document)} variants "
            f"({', '.join(chosen) or 'none'}); qualified ppo ≥ FGD on {qualified_at_least}"
        )
    print(f"({wall_s:.0f} s)")
    return 0


if __name__ == "__main__":
    run_main(main)
