"""On a real Flink cluster: the autoscaler on job shapes it was not written for.

Each case is a job of ``benchmarks/flink_support/shape_jobs.py`` with one slow operator
(a sleep per record, so its capacity per subtask is known and the ideal parallelism is
at most 4; the rates are chosen so that the ideal stays the same integer whether a
subtask handles 8 or 10 records/s, as the Python overhead on two busy cores varies).
The real ``kubesage flink autoscale`` loop runs on it, with guard rails of seconds,
until its decision is calm and nothing is backpressured; the end state is the
harness's own last measurement window (``shape_harness``), and only the end state is
asserted:

- the bottleneck's parallelism is within [ideal, 1.6 × ideal], where the ideal is
  measured from the job's own throughput (demand ÷ true rate per subtask ÷ target
  utilisation); the lower bound is taken at full utilisation (the fewest subtasks that
  keep up), since the decision rests anywhere up to 0.9 by design and a subtask's
  measured rate moves by ~10 % with the Python overhead on two busy cores;
- nothing is backpressured (Flink's OK level) at the end;
- few rescales: at most 3, none for a job that starts at the right parallelism; a job
  that becomes idle ends at the minimum parallelism.

The cases share the session's cluster and run side by side in the background (as many
as its task slots allow), started by the first test; each test waits for its own
case. A case that a TaskManager crash disturbed (PyFlink's thread mode can take the
shared TaskManager down when a Python operator's tasks are cancelled) is run once
more, and its report says so; a second crash fails it. A failure prints the case's
rescales, last decisions and final window.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest

from benchmarks.flink_support.cluster import LocalFlinkCluster
from benchmarks.flink_support.shape_harness import (
    SHAPE_SETTINGS,
    ShapeCase,
    ShapeResult,
    run_shapes,
)

from .conftest import TASK_SLOTS

MAX_RESCALES = 3
HEADROOM = 1.6
"""The bottleneck may end up to this factor above its ideal parallelism (the issue's bound)."""
RESULT_TIMEOUT_S = 1200.0


def case(name: str, args: str, bottleneck: str, **options: Any) -> ShapeCase:
    """A case from ``shape_jobs.py``'s command line (``options``: ShapeCase's fields)."""
    return ShapeCase(name, tuple(args.split()), bottleneck, **options)


CASES = (
    # The job: Table/SQL, datagen → Python UDF → blackhole, chaining off; no
    # source reports a backlog, and the datagen source reports no busy time.
    case(
        "sql-udf-thread-unchained",
        "--shape sql --chaining off --rate 18 --capacity 10",
        "PythonCalc",
    ),
    # Chained (PythonCalc -> sink), starting at parallelism 2 (the source keeps 1: at
    # equal parallelism the UDF would chain into the source, whose busy time and output
    # Flink does not report). Thread mode: in process mode a rescale or cancel can crash
    # the shared TaskManager (Beam: "Reference count must not be negative"), taking every
    # job beside it down; ``shape_jobs.py --mode process`` runs it on a cluster of its own.
    case(
        "sql-udf-chained",
        "--shape sql --rate 18 --capacity 10",
        "PythonCalc",
        parallelism=2,
    ),
    # Two datagen tables through UNION ALL into the UDF.
    case("sql-union", "--shape sql --union --chaining off --rate 9 --capacity 10", "PythonCalc"),
    # DataStream: a datagen table turned into a stream → map (thread mode) → sink.
    case("ds-datagen-thread", "--shape ds-datagen --rate 11 --capacity 10", "slow"),
    # The sample job's shape: a paced source reporting its backlog; slow → sink chained.
    case(
        "ds-paced-backlog-chained",
        "--shape ds-paced --backlog-metric --rate 18 --capacity 10",
        "slow",
    ),
    # A paced source without a backlog metric; operators unchained. While it catches up
    # after a rescale it is backpressured, so a ×2 probe may overshoot (2 → 4); once it
    # is caught up its consumers' demand is exact and the overshoot is scaled back after
    # the oscillation window (60 s): a longer deadline than the others.
    case(
        "ds-paced-nobacklog-unchained",
        "--shape ds-paced --chaining off --rate 18 --capacity 10",
        "slow",
        deadline_s=330.0,
    ),
    # Two paced sources (with backlogs) unioned into the bottleneck.
    case(
        "ds-union-backlog",
        "--shape ds-paced --union --backlog-metric --rate 8 --capacity 10",
        "slow",
    ),
    # keyBy into the bottleneck, whose max parallelism 9 its start parallelism 2 does
    # not divide.
    case(
        "ds-keyby-maxp9",
        "--shape ds-paced --key-by --max-parallelism 9 --backlog-metric "
        "--bottleneck-parallelism 2 --rate 15 --capacity 8",
        "slow",
    ),
    # Already at the right parallelism (18 rec/s, 10 rec/s per subtask: 3): no rescale.
    case(
        "ds-already-right",
        "--shape ds-paced --backlog-metric --bottleneck-parallelism 3 --rate 18 --capacity 10",
        "slow",
        min_run_s=45.0,
    ),
    # At the right parallelism, idle after 500 records (25 s): down to the minimum.
    case(
        "ds-goes-idle",
        "--shape ds-paced --backlog-metric --bottleneck-parallelism 3 --rate 20 --capacity 10 "
        "--idle-after 500",
        "slow",
        min_run_s=60.0,
    ),
)
NO_RESCALE = frozenset({"ds-already-right"})
IDLE = frozenset({"ds-goes-idle"})


@pytest.fixture(scope="module")
def shape_results(
    request: pytest.FixtureRequest, flink_cluster: LocalFlinkCluster
) -> Iterator[dict[str, Future[ShapeResult]]]:
    """Starts the selected cases side by side in the background; case name → result."""
    selected = set()
    for item in request.session.items:  # the cases this run selected (-k, node ids)
        callspec = getattr(item, "callspec", None)
        chosen = callspec.params.get("case") if callspec is not None else None
        if isinstance(chosen, ShapeCase):
            selected.add(chosen.name)
    futures = run_shapes(
        flink_cluster, [case for case in CASES if case.name in selected], slots=TASK_SLOTS
    )
    yield futures
    for future in futures.values():  # each case cancels its own job as it ends
        future.result(timeout=RESULT_TIMEOUT_S)


@pytest.mark.slow
@pytest.mark.timeout(RESULT_TIMEOUT_S + 60)  # above the wait below: a rerun case may need it
@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_job_shape_end_state(
    case: ShapeCase, shape_results: dict[str, Future[ShapeResult]]
) -> None:
    result = shape_results[case.name].result(timeout=RESULT_TIMEOUT_S)
    print(result.summary())  # shown with -rA: the suite's figures
    why = result.explain()
    assert not result.errors, why
    assert not result.backpressured, why
    assert result.ideal is not None and result.fewest is not None, why
    if case.name in IDLE:
        assert result.bottleneck_parallelism == SHAPE_SETTINGS.min_parallelism, why
    else:
        assert result.fewest <= result.bottleneck_parallelism, why
        assert result.bottleneck_parallelism <= math.floor(HEADROOM * result.ideal), why
    if case.name in NO_RESCALE:
        assert result.rescales == 0, why
    else:
        assert result.rescales <= MAX_RESCALES, why
    assert result.failed_rescales == 0, why
