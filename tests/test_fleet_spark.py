"""The Spark example (examples/spark/fleet_outliers.py, docs/dataset.md): PySpark in local
mode on a dataset gpudiag wrote finds the outliers gpudiag finds. Skipped, saying why,
where PySpark or a Java runtime is missing."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from fleetgen import analysed, dataset, fleet_dir

__all__ = ["analysed", "dataset", "fleet_dir"]

JOB = Path(__file__).resolve().parent.parent / "examples" / "spark" / "fleet_outliers.py"

pyspark = pytest.importorskip(
    "pyspark", reason="PySpark is not installed (pip install pyspark: about 450 MB, not an extra)"
)


def _java_problem() -> str | None:
    """Why no Java runtime would run Spark here, or None."""
    java = shutil.which("java")
    if java is None:
        return "no Java runtime (apt-get install default-jre-headless)"
    try:
        said = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=True
        ).stderr
    except (OSError, subprocess.SubprocessError) as error:
        return f"java -version failed: {error}"
    found = re.search(r'version "(?:1\.)?(\d+)', said)
    if found and int(found[1]) < 17 and int(pyspark.__version__.split(".")[0]) >= 4:
        return f"PySpark {pyspark.__version__} needs Java 17 or later, this is {found[1]}"
    return None


if (_problem := _java_problem()) is not None:
    pytest.skip(f"Spark needs Java: {_problem}", allow_module_level=True)


def _job() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fleet_outliers", JOB)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """A local Spark on one core, as small as it goes (no UI, few shuffle partitions)."""
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[1]")
        .appName("gpudiag test")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.mark.parametrize("threshold", [5.0, 1.0])
def test_spark_finds_the_outliers_gpudiag_finds(
    analysed: Any, dataset: Path, spark: Any, threshold: float
) -> None:
    """At gpudiag's threshold, and at a low one where the 1% rule and small MADs decide."""
    report = analysed
    if threshold != 5.0:
        from gpudiag.fleet.analysis import analyse
        from gpudiag.fleet.dataset import read_dataset

        report = analyse(read_dataset(dataset), threshold=threshold)
    rows = _job().fleet_outliers(spark, str(dataset), threshold).collect()
    theirs = {(r.model, r.node, r.reading, r.device, r.value): (r.median, r.mad) for r in rows}
    readings = spark.read.parquet(f"{dataset}/readings").select("template").distinct()
    templates = {r.template for r in readings.collect()}
    ours = {
        (o.model, o.node, o.reading, o.device, o.value): (o.median, o.mad)
        for o in report.outliers
        if o.reading in templates  # kernel figures are not the job's subject
    }
    assert theirs.keys() == ours.keys()
    assert ("h100-sxm5 x8", "node011", "gpu.{gpu}.temperature.gpu", "GPU 5", 88.0) in theirs
    for key, (median, mad) in ours.items():  # the group's median and MAD, as gpudiag's
        assert theirs[key] == pytest.approx((median, mad), rel=1e-12, abs=1e-12), key
    assert len(ours) >= (4 if threshold == 5.0 else 40)  # 4 and 76 when written
