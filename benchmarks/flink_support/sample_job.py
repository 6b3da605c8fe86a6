"""A PyFlink job with a known bottleneck, for the autoscaler's tests and benchmark.

Run it on a session cluster with ``flink run -d -py sample_job.py -- --rate 40 --capacity 20``
(plain ``python sample_job.py`` would start a local MiniCluster instead). It imports only
pyflink and the standard library, because it runs in the Flink venv.

Pipeline::

    Source: sequence -> pace  ──rebalance──▶  slow  ──rebalance──▶  sink (discarding)

- ``sequence`` numbers the records 0, 1, 2, … (parallelism 1; its position is
  checkpointed, so a restart resumes where it stopped);
- ``pace`` releases record ``n`` at ``start + n / rate``: the demand is a set rate in
  records/s (with ``--rate-schedule``, a rate that changes over time: ``ramp``,
  ``daily`` or ``T:R,T:R,…`` — see ``rate_schedule.py`` — and record ``n`` is released
  when the schedule has offered ``n`` records). When the job falls behind, the records
  it owes form a backlog that it reports as the gauge ``pendingRecords`` (what a Kafka
  source reports as its lag) and releases as fast as downstream accepts them. It
  sleeps while it waits, so it is pinned at parallelism 1 and the autoscaler must not scale it;
- ``slow`` sleeps ``1 / capacity`` s per record: a per-subtask capacity of ``capacity``
  records/s, so the ideal parallelism is ``ceil(rate / capacity)`` at full utilisation;
- ``sink`` discards.

Records carry a ``--record-bytes`` payload so that the few network buffers of the
local cluster fill within seconds: with 8-byte numbers thousands of records would sit
in flight and hide the backpressure for many minutes.

Bundles: PyFlink hands records to its Python worker in bundles and the Java task only
waits (counts as busy) when a bundle is flushed. A bundle of a few records flushed
every few ms keeps the task's ``busyTimeMsPerSecond`` equal to the time the Python
function really spends, so the busy-time metrics mean what the autoscaler assumes.
Checkpoints are unaligned so that a rescale under backpressure does not wait behind a
checkpoint barrier. ``--checkpoint-interval-ms 0`` turns Flink's periodic checkpoints
off: the job is checkpointed only on request (``POST /jobs/<id>/checkpoints``, what
kubesage's coordinator sends).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import cloudpickle
from pyflink.common import Configuration, Types, WatermarkStrategy
from pyflink.datastream import (
    CheckpointingMode,
    MapFunction,
    RuntimeContext,
    StreamExecutionEnvironment,
)
from pyflink.datastream.connectors.base import Sink
from pyflink.datastream.connectors.number_seq import NumberSequenceSource

# rate_schedule.py lies beside this file; `flink run -py` does not ship it to the Python
# workers, so the schedule inside Pace is pickled by value rather than by module name.
sys.path.insert(0, str(Path(__file__).resolve().parent))
import rate_schedule

cloudpickle.register_pickle_by_value(rate_schedule)

DISCARDING_SINK = "org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink"
BUNDLE_SIZE = 4
BUNDLE_TIME_MS = 20
EXECUTION_MODE = "thread"
NO_PERIODIC_CHECKPOINTS_MS = 2**63 - 1
"""Flink's own "periodic checkpoints off" interval (Long.MAX_VALUE): checkpointing stays
enabled, so a checkpoint requested over REST is exactly-once and unaligned, but the
checkpoint scheduler never starts one. Leaving checkpointing disabled instead makes
Flink 2.3 build the job with at-least-once barriers and no unaligned checkpoints
(checked on the real cluster): a requested checkpoint is accepted, but under
backpressure its barrier waits behind every buffered record, and one was still in
progress after a minute."""


class Pace(MapFunction):  # type: ignore[misc]
    """Releases record ``n`` at ``start_s + n / rate`` (or when ``schedule`` has offered
    ``n`` records); reports the records it owes."""

    def __init__(
        self,
        rate: float,
        start_s: float,
        record_bytes: int,
        schedule: rate_schedule.RateSchedule | None = None,
    ) -> None:
        self.rate = rate
        self.start_s = start_s
        self.padding = "x" * record_bytes
        self.pending = 0
        self.schedule = schedule

    def open(self, runtime_context: RuntimeContext) -> None:
        self.metrics = runtime_context.get_metrics_group()
        self.reporting = False
        if self.schedule is None:
            self._report_pending()

    def _report_pending(self) -> None:
        # Registered at the first record: until then the backlog after a restart is
        # unknown, and no reading is better than a 0 (a collector would take the drain
        # of the backlog for demand). Without a schedule the gauge is there from open().
        if not self.reporting:
            self.metrics.gauge("pendingRecords", lambda: int(self.pending))
            self.reporting = True

    def map(self, value: Any) -> Any:
        if self.schedule is not None:
            return self._map_scheduled(value, self.schedule)
        due_s = self.start_s + value / self.rate
        now_s = time.time()
        if due_s > now_s:
            time.sleep(due_s - now_s)
            now_s = due_s
        self.pending = max(0, int(self.rate * (now_s - self.start_s)) - int(value))
        return f"{value}:{self.padding}"

    def _map_scheduled(self, value: Any, schedule: rate_schedule.RateSchedule) -> Any:
        due_s = self.start_s + schedule.time_of(value)
        now_s = time.time()
        self.pending = max(0, int(schedule.records_due(now_s - self.start_s)) - int(value))
        self._report_pending()
        if due_s > now_s:
            time.sleep(due_s - now_s)
            now_s = due_s
        self.pending = max(0, int(schedule.records_due(now_s - self.start_s)) - int(value))
        return f"{value}:{self.padding}"


class Slow(MapFunction):  # type: ignore[misc]
    """Spends ``1 / capacity`` s per record: a known per-subtask capacity."""

    def __init__(self, capacity: float) -> None:
        self.delay_s = 1.0 / capacity

    def map(self, value: Any) -> Any:
        time.sleep(self.delay_s)
        return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=40.0, help="records/s the source offers")
    parser.add_argument(
        "--capacity", type=float, default=20.0, help="records/s one slow subtask handles"
    )
    parser.add_argument(
        "--record-bytes", type=int, default=1000, help="payload per record (fills buffers)"
    )
    parser.add_argument(
        "--checkpoint-interval-ms",
        type=int,
        default=10_000,
        help="Flink's periodic checkpoint interval; 0: none (checkpoints only on request, "
        "e.g. from kubesage's coordinator over REST)",
    )
    parser.add_argument(
        "--rate-schedule",
        default=None,
        help="a rate that changes over time: 'ramp', 'daily' (peak --rate) or "
        "'T:R,T:R,…' (seconds since record 0 : records/s, piecewise linear, then held)",
    )
    parser.add_argument(
        "--schedule-duration-s",
        type=float,
        default=None,
        help="length of a named --rate-schedule shape (default: its own, a few minutes)",
    )
    parser.add_argument("--start-time", type=float, default=None, help="epoch s of record 0")
    parser.add_argument("--name", default="kubesage-sample")
    args, _ = parser.parse_known_args(argv)
    if args.rate <= 0 or args.capacity <= 0:
        parser.error("--rate and --capacity must be positive")
    if args.checkpoint_interval_ms < 0:
        parser.error("--checkpoint-interval-ms must be ≥ 0 (0: no periodic checkpoints)")
    args.schedule = None
    if args.rate_schedule is not None:
        try:
            args.schedule = rate_schedule.parse_schedule(
                args.rate_schedule, peak_rate=args.rate, duration_s=args.schedule_duration_s
            )
        except ValueError as exc:
            parser.error(f"--rate-schedule: {exc}")
    return args


def build(env: StreamExecutionEnvironment, args: argparse.Namespace) -> None:
    """Adds the pipeline to ``env``."""
    start_s = args.start_time if args.start_time is not None else time.time()
    records = (
        env.from_source(
            NumberSequenceSource(0, 2**62), WatermarkStrategy.no_watermarks(), "sequence"
        )
        .set_parallelism(1)
        .map(
            Pace(args.rate, start_s, args.record_bytes, args.schedule),
            output_type=Types.STRING(),
        )
        .name("pace")
        .uid("pace")
        .set_parallelism(1)
    )
    slow = (
        records.rebalance()
        .map(Slow(args.capacity), output_type=Types.STRING())
        .name("slow")
        .uid("slow")
    )
    slow.rebalance().sink_to(Sink(DISCARDING_SINK)).name("sink").uid("sink")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    conf = Configuration()
    conf.set_string("python.fn-execution.bundle.size", str(BUNDLE_SIZE))
    conf.set_string("python.fn-execution.bundle.time", str(BUNDLE_TIME_MS))
    conf.set_string("python.fn-execution.arrow.batch.size", str(BUNDLE_SIZE))
    # One Python worker per operator instead of one per slot: cancelling tasks that share
    # a worker can crash the TaskManager in Beam's reference counting (seen with 2.3.0
    # during rescales: "Reference count must not be negative").
    conf.set_string("python.fn-execution.memory.managed", "false")
    conf.set_string("python.execution-mode", EXECUTION_MODE)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.enable_checkpointing(
        args.checkpoint_interval_ms or NO_PERIODIC_CHECKPOINTS_MS, CheckpointingMode.EXACTLY_ONCE
    )
    env.get_checkpoint_config().enable_unaligned_checkpoints()
    build(env, args)
    env.execute_async(args.name)


if __name__ == "__main__":
    main()
