"""Review #11: the fleet report's words say exactly what was checked (the planted fleet of
tests/fleetgen.py: node019's GPU 3 at half the h2d of the others, node005 the one node
with two runs)."""

from __future__ import annotations

from pathlib import Path

from gpudiag.fleet.analysis import analyse
from gpudiag.fleet.load import load_fleet
from gpudiag.fleet.report import report_text

from fleetgen import fleet_dir

__all__ = ["fleet_dir"]


def test_the_report_says_what_each_check_compared(fleet_dir: Path) -> None:
    """No "none more than 7% below alike nodes" beside a GPU 50% below (nodes are judged
    by their GPUs' median); a factor's effect says it is of nodes' medians; a chart of one
    node is named by the node, not "fleet (1 nodes)"."""
    text = report_text(analyse(load_fleet([fleet_dir], workers=1)))
    lines = text.splitlines()
    assert "node019 GPU 3: 27.47 GB/s (-50.1%)" in text  # a GPU far below, listed
    assert "  slowest nodes: no node's median of its GPUs is more than 7% below alike " \
        "nodes'; the devices below are judged one by one" in lines  # fmt: skip
    assert "none more than" not in text
    factors = [line for line in lines if line.startswith("  factor: ")]
    assert factors and all("of the variance of the nodes' medians of their " in f for f in factors)
    assert any("cpu.freq.governor explains 100% of the variance of the nodes' medians of "
               "their NUMA nodes" in f for f in factors)  # fmt: skip
    assert not any("(1 nodes)" in line for line in lines)
    charts = [line for line in lines if line.startswith("  chart: ")]
    assert charts and all(" node005: " in c for c in charts)
