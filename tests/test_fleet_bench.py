"""The fleet scale benchmark runs, at its smallest settings, and its figures are sane: the
decode floor and gpudiag both took CPU time, their ratio is theirs, the configuration
groups found are the ones planted, and the fleet read back from Parquet gave the same
report. No timing is judged (a shared machine cannot)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import REPO


def test_the_benchmark_runs_at_its_smallest_settings(wheel_venv, tmp_path) -> None:
    """From outside the checkout, in the wheel's environment (benchmarks/_wheel.py)."""
    result = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "fleet_scale.py"), "--smallest"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=tmp_path,
        env={**os.environ, "GPUDIAG_BENCH_VENV": str(wheel_venv)},
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("load average before: ") and lines[-1].startswith("load average")
    assert "floor CPU s" in lines[1] and "gpudiag CPU s" in lines[1]
    rows = [line.split() for line in lines[2:-1]]
    assert [(r[0], r[1], r[2]) for r in rows] == [("demo", "50", "8"), ("generated", "50", "2")]
    for row in rows:
        floor, cpu, ratio = float(row[4]), float(row[5]), float(row[6])
        assert 0 < floor < 120 and 0 < cpu < 120
        # both figures are printed to 0.01 s: their ratio is known to within that rounding
        rounding = (cpu / floor) * (0.005 / floor + 0.005 / cpu)
        assert ratio == pytest.approx(cpu / floor, abs=0.005 + rounding)
        assert row[7] == "1.5)"
        wall, peak_mb = float(row[8]), float(row[9])
        assert 0 < wall < 120 and 10 < peak_mb < 4096
        assert row[10] == row[12].rstrip(")") and row[11] == "(planted"
        assert row[10] == ("1" if row[0] == "demo" else "3")
        pq_mb, pq_cpu, pq_wall, pq_peak = (float(v) for v in row[13:17])
        assert pq_mb > 0 and 0 < pq_cpu < 120 and 0 < pq_wall < 120 and 10 < pq_peak < 4096
        assert row[17] == "same"
        assert 10 < float(row[18]) < 4096  # the --parquet run's peak
