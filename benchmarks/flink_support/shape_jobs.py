"""PyFlink jobs of several shapes around one slow operator, for the autoscaler's shape tests.

Run on a session cluster with ``flink run -d -py shape_jobs.py --shape NAME ...``; like
``sample_job.py`` beside it, it imports only pyflink and the standard library because
it runs in the Flink venv. Every shape has one bottleneck that sleeps
``1 / --capacity`` s per record (a known per-subtask capacity; the ideal parallelism is
``ceil(rate / (capacity × utilisation))``) and a source offering ``--rate`` records/s:

- ``sql``: Table API / SQL: ``datagen`` (``rows-per-second``) → a Python scalar UDF
  ``slow`` (vertex ``PythonCalc[…]``) → ``blackhole``; ``--union`` reads two datagen
  tables (``--rate`` each) through ``UNION ALL``. No source reports a backlog.
- ``ds-datagen``: DataStream: the same ``datagen`` table turned into a DataStream
  (``to_data_stream``) → a Python ``map`` ``slow`` → a discarding sink.
- ``ds-paced``: DataStream: ``NumberSequenceSource`` chained with ``pace`` (releases
  record ``n`` at ``start + n / rate``, as the sample job does; ``start`` is when the
  job first ran, shared through a file in the temp dir) → ``slow`` → sink. With
  ``--backlog-metric`` ``pace`` reports the records it owes as the gauge
  ``pendingRecords`` (what a Kafka source reports as its lag); without it there is no
  backlog metric. ``--union`` adds a second paced source (``--rate`` each) feeding the
  bottleneck through ``union``; ``--key-by`` puts a ``keyBy`` in front of ``slow``
  (``--max-parallelism`` sets its max parallelism); ``--idle-after N`` drops every
  record after the first ``N`` (the job becomes idle). ``pace`` numbers the
  records it releases from one sequence, so it cannot run in parallel: its max
  parallelism is 1 (it sleeps while it waits, which Flink counts as busy time).

``--chaining off`` disables operator chaining (``pipeline.operator-chaining.enabled``
for Table jobs; ``disable_chaining()`` on the operators after the source for
DataStream jobs, so that ``pace`` stays chained with its sequence: unchained, the
sequence would be backpressured by ``pace`` by design). ``--mode`` picks PyFlink's
thread or process execution mode. ``--bottleneck-parallelism`` starts the slow
operator at a parallelism other than the job's ``-p`` (DataStream shapes).

Bundles of a few records and unaligned checkpoints, as in ``sample_job.py`` (see its
docstring for why): the busy-time metrics then mean what the autoscaler assumes and a
rescale under backpressure does not wait behind a checkpoint barrier.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from typing import Any

from pyflink.common import Configuration, Types, WatermarkStrategy
from pyflink.datastream import (
    CheckpointingMode,
    DataStream,
    FlatMapFunction,
    MapFunction,
    RuntimeContext,
    StreamExecutionEnvironment,
)
from pyflink.datastream.connectors.base import Sink
from pyflink.datastream.connectors.number_seq import NumberSequenceSource
from pyflink.table import DataTypes, EnvironmentSettings, TableEnvironment
from pyflink.table.table_environment import StreamTableEnvironment
from pyflink.table.udf import udf

SHAPES = ("sql", "ds-datagen", "ds-paced")
DISCARDING_SINK = "org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink"
BUNDLE_SIZE = 4
BUNDLE_TIME_MS = 20
CHECKPOINT_INTERVAL_MS = 5_000
IDLE_POLL_S = 0.05
"""While idle, ``pace`` drops a sequence number every this many seconds."""


def shared_start_s(clock_file: str) -> float:
    """The job's start: the time the first ``pace`` opened, kept in ``clock_file``.

    Restarts (a rescale restores the sequence's position from a checkpoint) read it
    back, so the records owed across a restart stay owed. A file works because the
    local test cluster runs every TaskManager on one machine.
    """
    try:
        handle = os.open(clock_file, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        for _ in range(100):  # the first writer may not have written yet
            with open(clock_file) as existing:
                text = existing.read().strip()
            if text:
                return float(text)
            time.sleep(0.01)
        raise
    now_s = time.time()
    os.write(handle, f"{now_s!r}\n".encode())
    os.close(handle)
    return now_s


class Pace(FlatMapFunction):  # type: ignore[misc]
    """Releases record ``n`` at ``start + n / rate``; optionally reports what it owes."""

    def __init__(
        self, rate: float, clock_file: str, record_bytes: int, backlog: bool, idle_after: int
    ) -> None:
        self.rate = rate
        self.clock_file = clock_file
        self.start_s = 0.0
        self.padding = "x" * record_bytes
        self.backlog = backlog
        self.idle_after = idle_after
        self.pending = 0

    def open(self, runtime_context: RuntimeContext) -> None:
        self.start_s = shared_start_s(self.clock_file)
        if self.backlog:
            runtime_context.get_metrics_group().gauge("pendingRecords", lambda: int(self.pending))

    def flat_map(self, value: Any) -> Any:
        if 0 < self.idle_after <= value:
            # Idle: the demand is zero; the sequence is consumed slowly and dropped.
            self.pending = 0
            time.sleep(IDLE_POLL_S)
            return
        now_s = time.time()
        due_s = self.start_s + value / self.rate
        if due_s > now_s:
            time.sleep(due_s - now_s)
            now_s = due_s
        self.pending = max(0, int(self.rate * (now_s - self.start_s)) - int(value))
        yield f"{value}:{self.padding}"


class Slow(MapFunction):  # type: ignore[misc]
    """Spends ``1 / capacity`` s per record: a known per-subtask capacity."""

    def __init__(self, capacity: float) -> None:
        self.delay_s = 1.0 / capacity

    def map(self, value: Any) -> Any:
        time.sleep(self.delay_s)
        return str(value)[:64]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=SHAPES, required=True)
    parser.add_argument("--rate", type=float, default=20.0, help="records/s per source")
    parser.add_argument("--capacity", type=float, default=10.0, help="records/s per subtask")
    parser.add_argument("--mode", choices=("thread", "process"), default="thread")
    parser.add_argument("--chaining", choices=("on", "off"), default="on")
    parser.add_argument("--union", action="store_true", help="two sources, unioned")
    parser.add_argument("--key-by", action="store_true", help="keyBy in front of slow")
    parser.add_argument("--max-parallelism", type=int, default=0, help="of slow (0: Flink's)")
    parser.add_argument("--bottleneck-parallelism", type=int, default=0, help="0: the job's -p")
    parser.add_argument("--backlog-metric", action="store_true", help="pace reports a backlog")
    parser.add_argument("--idle-after", type=int, default=0, help="records; 0: never idle")
    parser.add_argument("--record-bytes", type=int, default=1000, help="payload per record")
    parser.add_argument(
        "--clock-file", default="", help="where pace keeps the job's start (default: temp dir)"
    )
    parser.add_argument("--name", default="kubesage-shape")
    args, _ = parser.parse_known_args(argv)
    if args.rate <= 0 or args.capacity <= 0:
        parser.error("--rate and --capacity must be positive")
    return args


def python_settings(mode: str) -> dict[str, str]:
    """PyFlink settings shared by every shape (see ``sample_job.py`` for the reasons)."""
    return {
        "python.fn-execution.bundle.size": str(BUNDLE_SIZE),
        "python.fn-execution.bundle.time": str(BUNDLE_TIME_MS),
        "python.fn-execution.arrow.batch.size": str(BUNDLE_SIZE),
        "python.fn-execution.memory.managed": "false",
        "python.execution-mode": mode,
        "execution.checkpointing.interval": f"{CHECKPOINT_INTERVAL_MS} ms",
        "execution.checkpointing.mode": "EXACTLY_ONCE",
        "execution.checkpointing.unaligned.enabled": "true",
    }


def datagen_ddl(table: str, args: argparse.Namespace) -> str:
    return (
        f"CREATE TEMPORARY TABLE {table} (id BIGINT, payload STRING) WITH ("
        f"'connector' = 'datagen', 'rows-per-second' = '{args.rate:g}', "
        f"'fields.payload.length' = '{args.record_bytes}', 'scan.parallelism' = '1')"
    )


def run_sql(args: argparse.Namespace) -> None:
    t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    config = t_env.get_config()
    for key, value in python_settings(args.mode).items():
        config.set(key, value)
    config.set("pipeline.name", args.name)
    if args.chaining == "off":
        config.set("pipeline.operator-chaining.enabled", "false")
    delay_s = 1.0 / args.capacity

    @udf(result_type=DataTypes.STRING())  # type: ignore[untyped-decorator]
    def slow(payload: str) -> str:
        time.sleep(delay_s)
        return payload[:64]

    t_env.create_temporary_function("slow", slow)
    tables = ["src", "src2"] if args.union else ["src"]
    for table in tables:
        t_env.execute_sql(datagen_ddl(table, args))
    t_env.execute_sql("CREATE TEMPORARY TABLE snk (v STRING) WITH ('connector' = 'blackhole')")
    rows = " UNION ALL ".join(f"SELECT payload FROM {table}" for table in tables)
    t_env.execute_sql(f"INSERT INTO snk SELECT slow(payload) FROM ({rows})")


def paced(
    env: StreamExecutionEnvironment, args: argparse.Namespace, suffix: str, clock_file: str
) -> DataStream:
    pace = Pace(args.rate, clock_file, args.record_bytes, args.backlog_metric, args.idle_after)
    return (
        env.from_source(
            NumberSequenceSource(0, 2**62),
            WatermarkStrategy.no_watermarks(),
            f"sequence{suffix}",
        )
        .set_parallelism(1)
        .set_max_parallelism(1)
        .flat_map(pace, output_type=Types.STRING())
        .name(f"pace{suffix}")
        .uid(f"pace{suffix}")
        .set_parallelism(1)
        .set_max_parallelism(1)
    )


def datagen_stream(env: StreamExecutionEnvironment, args: argparse.Namespace) -> DataStream:
    t_env = StreamTableEnvironment.create(env)
    t_env.execute_sql(datagen_ddl("src", args))
    rows = t_env.to_data_stream(t_env.from_path("src"))
    return rows.map(lambda row: str(row[1]), output_type=Types.STRING()).name("payload")


def run_datastream(args: argparse.Namespace) -> None:
    conf = Configuration()
    for key, value in python_settings(args.mode).items():
        conf.set_string(key, value)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.enable_checkpointing(CHECKPOINT_INTERVAL_MS, CheckpointingMode.EXACTLY_ONCE)
    env.get_checkpoint_config().enable_unaligned_checkpoints()
    if args.shape == "ds-datagen":
        records = datagen_stream(env, args)
    else:
        # The clock starts when the job first runs, not when it was built: deploying
        # takes seconds that would otherwise start the job with a backlog.
        clock_file = args.clock_file or os.path.join(
            tempfile.gettempdir(), f"kubesage-pace-{uuid.uuid4().hex}"
        )
        records = paced(env, args, "", clock_file)
        if args.union:
            records = records.union(paced(env, args, "-b", clock_file))
    if args.key_by:
        into_slow = records.key_by(lambda value: int(value.split(":", 1)[0]) % 97, Types.INT())
    else:
        into_slow = records.rebalance()
    slow = into_slow.map(Slow(args.capacity), output_type=Types.STRING()).name("slow").uid("slow")
    if args.bottleneck_parallelism:
        slow = slow.set_parallelism(args.bottleneck_parallelism)
    if args.max_parallelism:
        slow = slow.set_max_parallelism(args.max_parallelism)
    sink = slow.sink_to(Sink(DISCARDING_SINK)).name("sink").uid("sink")
    if args.bottleneck_parallelism:
        sink = sink.set_parallelism(args.bottleneck_parallelism)  # chains with slow
    if args.chaining == "off":
        slow.disable_chaining()
        sink.disable_chaining()
    env.execute_async(args.name)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.shape == "sql":
        run_sql(args)
    else:
        run_datastream(args)


if __name__ == "__main__":
    main()
