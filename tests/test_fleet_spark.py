"""The Spark example (examples/spark/fleet_outliers.py, docs/dataset.md): PySpark in local
mode on a dataset gpudiag wrote finds the outliers gpudiag finds. Skipped, saying why,
where PySpark or a Java runtime is missing."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from gpudiag.fleet.analysis import analyse
from gpudiag.fleet.dataset_read import read_dataset
from gpudiag.snapshot import load, save

from fleetgen import fleet_dir, with_values, write_operator_fleet
from fleetgen_dataset import analysed, dataset

__all__ = ["analysed", "dataset", "fleet_dir"]

OPERATOR_NODES = 40
JOB = Path(__file__).resolve().parent.parent / "examples" / "spark" / "fleet_outliers.py"

# .ci/run installs PySpark beside the checkout (pip --target .pyspark: about 490 MB, no
# extra of gpudiag's); a virtual environment's own PySpark is taken first.
BESIDE = JOB.parent.parent.parent / ".pyspark"
if importlib.util.find_spec("pyspark") is None and (BESIDE / "pyspark").is_dir():
    sys.path.append(str(BESIDE))
pyspark = pytest.importorskip(
    "pyspark",
    reason="PySpark is not installed (pip install pyspark, or pip install --target .pyspark"
    " pyspark as .ci/run does: about 490 MB, not an extra)",
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


@pytest.fixture(scope="module")
def operator_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """issue 38's realistic fleet (three GPU models, figures that spread, outliers near the
    threshold, one damaged file) appended to a dataset."""
    from gpudiag.fleet.dataset import append_dataset
    from gpudiag.fleet.load import load_fleet

    snapshots = tmp_path_factory.mktemp("operator")
    planted = write_operator_fleet(snapshots, OPERATOR_NODES)
    # a healthy node's GPU 1 capped 0.4% above the rest (whose MAD is 0): within 1% of the
    # median, so not odd
    faulty = {name for names in planted.values() for name in names}
    healthy = next(f"node{n:04d}" for n in range(1, 99) if f"node{n:04d}" not in faulty)
    path = snapshots / f"{healthy}.json"
    save(with_values(load(path), {"gpu.1.power.limit": 703.0}), path)
    # node0020's earlier run, before GPU 3 was capped: its latest run must be the one judged
    latest = load(snapshots / "node0020.json")
    assert latest.created > "2026-10-01T00:00:00Z"
    values = {"gpu.3.power.limit": 700.0, "gpu.3.power.enforced_limit": 700.0}
    earlier = replace(with_values(latest, values), created="2026-10-01T00:00:00Z")
    (snapshots / "runs").mkdir()
    save(earlier, snapshots / "runs" / "node0020-earlier.json")
    root = tmp_path_factory.mktemp("operator-ds") / "fleet"
    append_dataset(load_fleet([snapshots], workers=1), str(root))
    return root


def _compare(spark: Any, dataset: Path, threshold: float, report: Any) -> dict[tuple, tuple]:
    """Spark's outliers of readings against the report's: the same (model, node, reading,
    device, value), with the same median and MAD; Spark's, keyed."""
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
    for key, (median, mad) in ours.items():  # the group's median and MAD, as gpudiag's
        assert theirs[key] == pytest.approx((median, mad), rel=1e-12, abs=1e-12), key
    return theirs


@pytest.mark.parametrize("threshold", [5.0, 1.0])
def test_spark_finds_the_outliers_gpudiag_finds(
    analysed: Any, dataset: Path, spark: Any, threshold: float
) -> None:
    """At gpudiag's threshold, and at a low one where small MADs decide."""
    report = analysed
    if threshold != 5.0:
        report = analyse(read_dataset(dataset), threshold=threshold)
    theirs = _compare(spark, dataset, threshold, report)
    assert ("h100-sxm5 x8", "node011", "gpu.{gpu}.temperature.gpu", "GPU 5", 88.0) in theirs
    assert len(theirs) >= (4 if threshold == 5.0 else 40)  # 4 and 76 when written


def test_spark_agrees_on_a_realistic_fleet(operator_dataset: Path, spark: Any) -> None:
    """Spread figures, outliers near the threshold, positional readings out of place."""
    theirs = _compare(spark, operator_dataset, 5.0, analyse(read_dataset(operator_dataset)))
    readings = {key[2] for key in theirs}
    assert "gpu.{gpu}.numa_node" in readings  # positional: compared per GPU, not pooled
    assert len(theirs) >= 10  # 18 when written
    assert not [key for key in theirs if key[4] == 703.0]  # within 1% of the median
    assert ("h100-sxm5 x8", "node0020", "gpu.{gpu}.power.limit", "GPU 3", 500.0) in theirs
