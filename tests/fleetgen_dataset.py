"""The planted fleet of tests/fleetgen.py as a fleet dataset (docs/dataset.md), for the
tests that read one back: DuckDB's (tests/test_fleet_dataset.py) and Spark's
(tests/test_fleet_spark.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def dataset(fleet_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The planted fleet appended to a dataset (docs/dataset.md) in two batches: the
    node005's later run (history/) first, then everything (whose later run is already
    there)."""
    from gpudiag.fleet.dataset import append_dataset
    from gpudiag.fleet.load import load_fleet

    root = tmp_path_factory.mktemp("ds") / "fleet"
    assert append_dataset(load_fleet([fleet_dir / "history"], workers=1), str(root)) == 1
    assert append_dataset(load_fleet([fleet_dir], workers=1), str(root)) == 20
    return root


@pytest.fixture(scope="session")
def analysed(dataset: Path) -> Any:
    """The fleet report (a FleetReport) of the dataset, read back."""
    from gpudiag.fleet.analysis import analyse
    from gpudiag.fleet.dataset_read import read_dataset

    return analyse(read_dataset(dataset))
