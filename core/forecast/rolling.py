"""Rolling-origin evaluation: several cut-offs, each model retrained before each.

The steps from the first cut-off to the end of the data are split into ``blocks``
equal test blocks (the last one takes the remainder). For block k every model
trains on all steps before its start — never on the block itself or anything
after it — and is scored on that block only (forecast origins and targets inside
it), exactly as :func:`kubesage.core.forecast.evaluate.evaluate` does for one
cut-off. A quiet or busy test period then cannot decide the verdict alone.

The document keeps the single-cut-off keys: ``models`` (and ``ablations``) hold
the mean over blocks of every figure (burst ``cells`` are summed; a figure null in a
block is left out of its mean), and ``blocks`` lists each block's own document with its
cut-off and end. A headline figure (a horizon's ``wape``, a quantile's ``wql``) is then
the mean over metrics of those per-metric means, as in one block: a metric whose WAPE
is undefined in one block (no non-zero truth there) still counts through the others,
instead of the mean mixing headlines over different metrics.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kubesage.core.errors import InputError
from kubesage.core.forecast import DEFAULT_HISTORY, MODEL_NAMES
from kubesage.core.forecast.evaluate import Evaluation, Progress, evaluate
from kubesage.core.forecast.metrics import headlines_from_per_metric, mean_of
from kubesage.core.forecast.panel import MetricPanel
from kubesage.core.forecast.training import TrainConfig


@dataclass(frozen=True)
class Block:
    """Train on steps ``[0, cut_off)``, test on ``[cut_off, end)``."""

    cut_off: int
    end: int


def blocks_after(first_cut_off: int, steps: int, count: int, *, min_steps: int = 1) -> list[Block]:
    """``count`` consecutive test blocks from ``first_cut_off`` to ``steps``."""
    if count < 1:
        raise InputError(f"--rolling must be at least 1, got {count}")
    length = (steps - first_cut_off) // count
    if length < min_steps:
        raise InputError(
            f"{steps - first_cut_off} test steps after the cut-off cannot make {count} blocks "
            f"of at least {min_steps} steps each"
        )
    starts = [first_cut_off + k * length for k in range(count)]
    ends = [*starts[1:], steps]
    return [Block(cut_off=s, end=e) for s, e in zip(starts, ends, strict=True)]


def rolling_evaluate(
    panel: MetricPanel,
    first_cut_off: int,
    blocks: int,
    *,
    horizons: Sequence[int] = (1, 5, 15),
    models: Sequence[str] = MODEL_NAMES,
    ablations: Sequence[str] = (),
    quantiles: Sequence[float] = (),
    config: TrainConfig | None = None,
    history: int = DEFAULT_HISTORY,
    progress: Progress | None = None,
    train_until_label: float | None = None,
) -> Evaluation:
    """Evaluate at every cut-off of :func:`blocks_after`; the mean goes in ``models``
    (``train_until_label``: the first cut-off as asked for, reported as ``train_until``
    instead of its grid step's time, as :func:`evaluate` does)."""
    plan = blocks_after(first_cut_off, panel.steps, blocks, min_steps=max(horizons, default=1))
    evaluations: list[Evaluation] = []
    block_documents: list[dict[str, object]] = []
    for k, block in enumerate(plan, start=1):

        def tell(message: str, k: int = k) -> None:
            if progress:
                progress(f"block {k}/{len(plan)}: {message}")

        evaluation = evaluate(
            panel,
            block.cut_off,
            test_until=block.end,
            horizons=horizons,
            models=models,
            ablations=ablations,
            quantiles=quantiles,
            config=config,
            history=history,
            progress=tell,
            train_until_label=train_until_label if k == 1 else None,
        )
        evaluations.append(evaluation)
        block_documents.append(
            {
                **evaluation.document,
                "train_seconds": {k: round(v, 2) for k, v in evaluation.train_seconds.items()},
            }
        )
    first = evaluations[0].document
    notes = {
        f"{name} (block {k})": note
        for k, e in enumerate(evaluations, start=1)
        for name, note in e.notes.items()
    }
    document: dict[str, object] = {
        "train_until": first["train_until"],
        "data_start": panel.start_s,
        "test_until": block_documents[-1]["test_until"],
        "test_steps": panel.steps - first_cut_off,
        "entities": first["entities"],
        "metrics": first["metrics"],
        "graph": f"per block: {evaluations[0].graph}, …",
        "rolling": len(plan),
        "models": mean_over([d["models"] for d in block_documents]),
    }
    if ablations:
        document["ablations"] = mean_over([d["ablations"] for d in block_documents])
    for key in ("models", "ablations"):
        headlines_from_per_metric(document.get(key))
    if notes:
        document["notes"] = notes
    document["blocks"] = block_documents
    seconds = {
        name: sum(e.train_seconds[name] for e in evaluations)
        for name in evaluations[0].train_seconds
    }
    return Evaluation(
        document=document, graph=str(document["graph"]), train_seconds=seconds, notes=notes
    )


def mean_over(documents: Sequence[object]) -> object:
    """The element-wise mean of same-shaped score documents (``cells`` counts are summed;
    a figure missing in a block — None — is left out of its mean)."""
    head = documents[0]
    if isinstance(head, dict):
        return {
            key: (
                sum(int(d[key]) for d in documents if isinstance(d, dict))
                if key == "cells"
                else mean_over([d[key] for d in documents if isinstance(d, dict)])
            )
            for key in head
        }
    return mean_of([float(d) if isinstance(d, int | float) else None for d in documents])
