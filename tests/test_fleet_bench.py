"""The fleet scale benchmark runs, at its smallest settings, and its figures are sane: both
sides found the same configuration groups (the two planted ones and the rest)."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO


def test_the_benchmark_runs_at_its_smallest_settings() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "fleet_scale.py"), "--smallest"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("load average before: ") and lines[-1].startswith("load average")
    rows = [line.split() for line in lines[2:-1]]
    assert [(r[0], r[1]) for r in rows] == [("50", "2"), ("50", "8")]
    for row in rows:
        seconds, peak_mb = float(row[4]), float(row[5])
        assert 0 < seconds < 120 and 10 < peak_mb < 4096
        assert row[8:11] == ["3", "(reference", "3)"]
        pq_seconds, pq_peak_mb = float(row[12]), float(row[13])  # the fleet read from Parquet
        assert float(row[11]) > 0 and 0 < pq_seconds < 120 and 10 < pq_peak_mb < 4096
        assert row[14] == "same"
