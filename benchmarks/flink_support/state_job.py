"""A Table/SQL job that holds keyed state of a set size, for the checkpoint I/O figures.

``flink run -d -py state_job.py -- --keys 8000 --value-bytes 1000``: a ``datagen`` source
of ``(k, p)`` rows (``--keys`` distinct keys, ``p`` a random string of ``--value-bytes``
characters) at ``--rate`` rows/s, ``SELECT k, LAST_VALUE(p) … GROUP BY k`` (one value per
key in the state backend: about ``keys × value-bytes`` of state once every key has
been seen) and a ``blackhole`` sink. Java operators only, so the state is the
backend's own and a checkpoint writes all of it (the default hashmap backend takes
full snapshots). The sample job's checkpoints hold only a few tens of kB of in-flight
records: too little to load the checkpoint storage.

``--checkpoint-interval-ms 0`` (the default) turns Flink's periodic checkpoints off
the way ``sample_job.py`` does: checkpointing stays enabled, and the job is
checkpointed only on request (kubesage's coordinator). It imports only pyflink and
the standard library, because it runs in the Flink venv.
"""

from __future__ import annotations

import argparse

from pyflink.datastream import CheckpointingMode, StreamExecutionEnvironment
from pyflink.table import StreamTableEnvironment

NO_PERIODIC_CHECKPOINTS_MS = 2**63 - 1
"""Flink's "periodic checkpoints off" interval (see ``sample_job.py``)."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=8000, help="distinct keys")
    parser.add_argument("--value-bytes", type=int, default=1000, help="state bytes per key")
    parser.add_argument("--rate", type=int, default=2000, help="rows/s the source emits")
    parser.add_argument(
        "--checkpoint-interval-ms",
        type=int,
        default=0,
        help="Flink's periodic checkpoint interval; 0: none (checkpoints only on request)",
    )
    parser.add_argument("--name", default="kubesage-state")
    args, _ = parser.parse_known_args(argv)
    if min(args.keys, args.value_bytes, args.rate) <= 0 or args.checkpoint_interval_ms < 0:
        parser.error("--keys, --value-bytes and --rate must be positive, the interval ≥ 0")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(
        args.checkpoint_interval_ms or NO_PERIODIC_CHECKPOINTS_MS, CheckpointingMode.EXACTLY_ONCE
    )
    t_env = StreamTableEnvironment.create(env)
    t_env.get_config().set("pipeline.name", args.name)
    t_env.execute_sql(
        "CREATE TEMPORARY TABLE src (k INT, p STRING) WITH ('connector' = 'datagen', "
        f"'rows-per-second' = '{args.rate}', 'fields.k.min' = '0', "
        f"'fields.k.max' = '{args.keys - 1}', 'fields.p.length' = '{args.value_bytes}')"
    )
    t_env.execute_sql(
        "CREATE TEMPORARY TABLE snk (k INT, p STRING) WITH ('connector' = 'blackhole')"
    )
    t_env.execute_sql("INSERT INTO snk SELECT k, LAST_VALUE(p) FROM src GROUP BY k")


if __name__ == "__main__":
    main()
