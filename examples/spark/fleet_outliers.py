"""The fleet's outliers per GPU model, computed by Spark from a gpudiag dataset.

A gpudiag dataset (`gpudiag fleet SNAPSHOTS... --dataset DIR`, docs/dataset.md) is plain
Hive-partitioned Parquet; this job reads its `runs` and `readings` tables and gives, per
node type and reading, the median and MAD of each node's latest value and the values far
from them, by the rule `gpudiag fleet` uses (docs/dataset.md, "Outliers per model"):

    spark-submit examples/spark/fleet_outliers.py DIR [--threshold 5] [--output OUT]

DIR is any path Spark reads (a folder, hdfs://, s3a://...). Without --output the outliers
are printed, one JSON object a line; with it they are written to OUT as JSON files.
It needs PySpark only (not gpudiag): the medians are exact (Spark's `percentile`), as
gpudiag's are, so the answer is the same as `gpudiag fleet DIR --format json`'s outliers of
readings (tests/test_fleet_spark.py compares them).
"""

from __future__ import annotations

import argparse
import json
import sys

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

#: The robust z's scale: the MAD of a normal sample times this is its standard deviation.
MAD_SCALE = 1.4826
#: A value within this fraction of its group's median is never odd (gpudiag's rule).
NEAR = 0.01
#: The fewest nodes in a group for its median to say anything.
MIN_NODES = 3


def _table(spark: SparkSession, root: str, name: str) -> DataFrame:
    """One table of the dataset, its `date` and `model` taken from the folder names."""
    return spark.read.option("basePath", f"{root}/{name}").parquet(f"{root}/{name}")


def fleet_outliers(spark: SparkSession, root: str, threshold: float = 5.0) -> DataFrame:
    """The outliers of the latest run of every node: model, node, reading (its template),
    device, value, unit, and the group's median and MAD."""
    newest = Window.partitionBy("node").orderBy(F.col("created").desc(), F.col("path").desc())
    latest = (
        _table(spark, root, "runs")
        .withColumn("n", F.row_number().over(newest))
        .where(F.col("n") == 1)
        .select("run_id")
    )
    readings = _table(spark, root, "readings")
    numbers = (
        readings.join(latest, "run_id")
        .where(
            F.col("slot").isNotNull() & F.col("value").isNotNull() & (F.col("kind") != "counter")
        )
        .select(
            "model",
            "node",
            "template",
            "device",
            "unit",
            "value",
            F.when(
                F.col("template").startswith("numa.") | (F.col("kind") == "positional"),
                F.col("device"),
            )
            .otherwise(F.lit(""))
            .alias("place"),
        )
    )
    group = ["model", "template", "place"]
    centre = numbers.groupBy(*group).agg(
        F.count(F.lit(1)).alias("rows"), F.percentile("value", 0.5).alias("median")
    )
    spread = (
        numbers.join(centre, group)
        .groupBy(*group, "rows", "median")
        .agg(F.percentile(F.abs(F.col("value") - F.col("median")), 0.5).alias("mad"))
    )
    off = F.abs(F.col("value") - F.col("median"))
    return (
        numbers.join(spread, group)
        .where(
            (F.col("rows") >= MIN_NODES)
            & (off > F.abs(F.col("median")) * NEAR)
            & ((F.col("mad") == 0) | (off / (MAD_SCALE * F.col("mad")) > threshold))
        )
        .select(
            "model",
            "node",
            F.col("template").alias("reading"),
            "device",
            "value",
            "unit",
            "median",
            "mad",
        )
        .orderBy("model", "reading", "node", "device")
    )


def main(argv: list[str] | None = None) -> int:
    """spark-submit's entry: the outliers printed as JSON lines, or written to --output."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", help="the dataset's folder or URL (gpudiag fleet --dataset)")
    parser.add_argument(
        "--threshold", type=float, default=5.0, help="robust z beyond which a value is odd"
    )
    parser.add_argument(
        "--output", help="write the outliers here as JSON files instead of printing them"
    )
    args = parser.parse_args(argv)
    spark = SparkSession.builder.appName("gpudiag fleet outliers").getOrCreate()
    try:
        found = fleet_outliers(spark, args.dataset.rstrip("/"), args.threshold)
        if args.output:
            found.write.mode("overwrite").json(args.output)
        else:
            for row in found.toLocalIterator():
                print(json.dumps(row.asDict(), sort_keys=True))
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
