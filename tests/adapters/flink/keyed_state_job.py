"""A Table/SQL job with keyed state, for the state-tiering tests (runs in the Flink venv).

``flink run -d -py keyed_state_job.py -- --rate 50 --keys 200``: a ``datagen`` source of
``(k, v)`` rows with ``--keys`` distinct keys, a ``GROUP BY k`` count and sum (keyed
state in whatever state backend the job is configured with: Java operators only, so the
state is the backend's own, not a Python worker's) and a ``blackhole`` sink. Flink
checkpoints it every ``--checkpoint-interval-ms``. It imports only pyflink and the
standard library.
"""

from __future__ import annotations

import argparse

from pyflink.table import EnvironmentSettings, TableEnvironment


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=50, help="rows/s the source emits")
    parser.add_argument("--keys", type=int, default=200, help="distinct keys")
    parser.add_argument("--checkpoint-interval-ms", type=int, default=2000)
    parser.add_argument("--name", default="kubesage-keyed-state")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    config = t_env.get_config()
    config.set("pipeline.name", args.name)
    config.set("execution.checkpointing.interval", f"{args.checkpoint_interval_ms} ms")
    t_env.execute_sql(
        "CREATE TABLE src (k INT, v BIGINT) WITH ('connector' = 'datagen', "
        f"'rows-per-second' = '{args.rate}', 'fields.k.min' = '0', "
        f"'fields.k.max' = '{args.keys - 1}')"
    )
    t_env.execute_sql(
        "CREATE TABLE snk (k INT, c BIGINT, s BIGINT) WITH ('connector' = 'blackhole')"
    )
    t_env.execute_sql("INSERT INTO snk SELECT k, COUNT(*), SUM(v) FROM src GROUP BY k")


if __name__ == "__main__":
    main()
