"""A TPC-H-like PySpark job over generated tables, for event logs with real shuffles.

Run it with spark-submit (``kubesage spark submit -- …/tpch_job.py``) or
``python -m`` with pyspark installed. Tables are generated in Spark from
``spark.range`` with seeded pseudo-random columns (no files), at ``--scale``
lineitem rows per unit; broadcast joins are off so joins shuffle both sides:

- q1: pricing summary — lineitem grouped by return flag and line status;
- q3: shipping priority — customer ⋈ orders ⋈ lineitem, revenue per order, top 10;
- wide: lineitem repartitioned by part key, then counted per part (an all-to-all
  shuffle of the whole table).

    spark-submit tpch_job.py [--scale 200000] [--partitions 8]
"""

from __future__ import annotations

import argparse


def main() -> int:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scale", type=int, default=200_000, help="lineitem rows")
    parser.add_argument("--partitions", type=int, default=8)
    args = parser.parse_args()

    spark = (
        SparkSession.builder.appName("kubesage-tpch-like")
        .config("spark.sql.autoBroadcastJoinThreshold", "-1")
        .config("spark.sql.shuffle.partitions", str(args.partitions))
        .getOrCreate()
    )
    orders_n = max(1, args.scale // 4)
    customers_n = max(1, args.scale // 40)
    lineitem = spark.range(0, args.scale, numPartitions=args.partitions).select(
        (F.col("id") % orders_n).alias("l_orderkey"),
        (F.col("id") % 2_000).alias("l_partkey"),
        (F.rand(1) * 50).cast("int").alias("l_quantity"),
        (F.rand(2) * 100_000).alias("l_extendedprice"),
        (F.rand(3) * 0.1).alias("l_discount"),
        F.element_at(
            F.array(F.lit("A"), F.lit("N"), F.lit("R")), (F.col("id") % 3 + 1).cast("int")
        ).alias("l_returnflag"),
        F.when(F.col("id") % 2 == 0, "O").otherwise("F").alias("l_linestatus"),
    )
    orders = spark.range(0, orders_n, numPartitions=args.partitions).select(
        F.col("id").alias("o_orderkey"),
        (F.col("id") % customers_n).alias("o_custkey"),
        (F.rand(4) * 2_000).cast("int").alias("o_orderdate"),
    )
    customer = spark.range(0, customers_n, numPartitions=args.partitions).select(
        F.col("id").alias("c_custkey"),
        F.element_at(
            F.array(*(F.lit(s) for s in ("BUILDING", "AUTOMOBILE", "MACHINERY"))),
            (F.col("id") % 3 + 1).cast("int"),
        ).alias("c_mktsegment"),
    )

    q1 = (
        lineitem.groupBy("l_returnflag", "l_linestatus")
        .agg(
            F.sum("l_quantity").alias("sum_qty"),
            F.sum(F.col("l_extendedprice") * (1 - F.col("l_discount"))).alias("sum_disc_price"),
            F.count("*").alias("count_order"),
        )
        .orderBy("l_returnflag", "l_linestatus")
    )
    q3 = (
        customer.where(F.col("c_mktsegment") == "BUILDING")
        .join(orders, F.col("c_custkey") == F.col("o_custkey"))
        .where(F.col("o_orderdate") < 1_000)
        .join(lineitem, F.col("l_orderkey") == F.col("o_orderkey"))
        .groupBy("l_orderkey", "o_orderdate")
        .agg(F.sum(F.col("l_extendedprice") * (1 - F.col("l_discount"))).alias("revenue"))
        .orderBy(F.desc("revenue"))
        .limit(10)
    )
    wide = lineitem.repartition(args.partitions, "l_partkey").groupBy("l_partkey").count()
    print(f"q1 groups: {len(q1.collect())}")
    print(f"q3 top orders: {len(q3.collect())}")
    print(f"wide parts: {wide.count()}")
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
