"""Review #8: one node's nvidia-smi -q idle and loaded (realdata/nvidia-smi-q, driver
590.48.01, which prints the temperature thresholds only relative to T.Limit) compared by
`gpudiag diff`: what moves with the load is no configuration change."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from gpudiag.diff import diff_snapshots, report_text
from gpudiag.importing import import_text
from gpudiag.model import ProbeResult, ProbeStatus, Snapshot
from gpudiag.rulefile import load_rules
from gpudiag.session import with_findings

from conftest import realdata_dir


def _snapshot(name: str) -> Snapshot:
    """The judged import of one realdata file, as `gpudiag import` makes it."""
    kind, readings = import_text((realdata_dir() / name).read_text())
    probe = ProbeResult(f"import-{kind}", ProbeStatus.OK, 0.0, tuple(readings))
    now = datetime.now(timezone.utc).isoformat()
    return with_findings(Snapshot("imported", now, "test", probes=(probe,)), load_rules())


@pytest.mark.parametrize(
    ("model", "margins"),
    [("nvidia-h100-80gb-hbm3", (48, 28)), ("nvidia-h100-mig", (47, 26))],
)
def test_diff_of_one_node_idle_and_loaded_shows_no_threshold_change(
    model: str, margins: tuple[int, int]
) -> None:
    """The import made the slowdown threshold up as temperature + T.Limit margin + 2 C, of
    two sensors, so it drifted with the load (H100 89 -> 87 C, H100 MIG 89 -> 79 C) and
    the diff called it a configuration change; so were the T.Limit margin and the
    throttle reasons, which move with the load. Now no temperature reading nor throttle
    reason is a configuration change; the margins still differ, among the readings that
    always vary (`diff --all`)."""
    name = f"nvidia-smi-q/nvgpuexp__linux-x86_64__{model}__590.48.01__{{}}.txt"
    idle, loaded = (_snapshot(name.format(load)) for load in ("idle", "load"))
    diff = diff_snapshots(idle, loaded)
    changed = [c.key for c in diff.differences() if ".temperature." in c.key]
    assert changed == [], changed
    assert "gpu.0.throttle_reasons" not in {c.key for c in diff.differences()}
    assert "temperature" not in report_text(diff, idle, loaded)
    varying = {c.key: (c.a.value, c.b.value) for c in diff.differences(include_noisy=True)}
    assert varying["gpu.0.temperature.slowdown_margin"] == margins
    assert varying["gpu.0.throttle_reasons"] == (["GpuIdle"], [])
