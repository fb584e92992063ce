"""The T.Limit temperatures of nvidia-smi -q (realdata/nvidia-smi-q). Review #8: one node's
-q idle and loaded (driver 590.48.01, which prints the thresholds only relative to T.Limit)
compared by `gpudiag diff`: what moves with the load is no configuration change."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from gpudiag.diff import diff_snapshots, report_text
from gpudiag.importing import import_text
from gpudiag.model import ProbeResult, ProbeStatus, Snapshot
from gpudiag.rulefile import load_rules
from gpudiag.session import with_findings

from conftest import realdata_dir

H100 = "nvidia-smi-q/nvgpuexp__linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01__{}.txt"


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


def test_r610_names_the_margin_gpu_current_t_limit_temp() -> None:
    """R610's -q prints the margin as 'GPU Current T.Limit Temp' (the RTX 2080 SUPER at
    610.57.04: N/A there); an H100's 590.48.01 -q with that label reads its 46 C, and the
    margin to slowdown with it (it was 'no T.Limit temperatures here (older driver)')."""
    name = "nvidia-smi-q/nvgpuexp__linux-x86_64__nvidia-geforce-rtx-2080-super__610.57.04__idle.txt"
    r = dict((x.key, x) for x in import_text((realdata_dir() / name).read_text())[1])
    margin = r["gpu.0.temperature.tlimit_margin"]
    assert margin.source.endswith("/Temperature/GPU Current T.Limit Temp"), margin
    assert margin.reason == "nvidia-smi printed 'N/A'"
    text = (realdata_dir() / H100.format("idle")).read_text()
    assert text.count("GPU T.Limit Temp  ") == 1
    renamed = text.replace("GPU T.Limit Temp  ", "GPU Current T.Limit Temp  ")
    r = dict((x.key, x) for x in import_text(renamed)[1])
    assert r["gpu.0.temperature.tlimit_margin"].value == 46
    assert r["gpu.0.temperature.slowdown_margin"].value == 48


def test_what_moves_with_the_load_is_no_configuration() -> None:
    """The fleet compares configuration for equality across alike nodes and a diff shows
    it by default: the T.Limit margins and the throttle reasons move with the load (the
    H100's margin 46 -> 26 C idle to loaded), so they are measurements; the thresholds,
    absolute or relative, are configuration."""
    from gpudiag import shipped
    from gpudiag.catalog import Kind

    for suffix in ("temperature.tlimit_margin", "temperature.slowdown_margin", "throttle_reasons"):
        assert shipped.kind_of(f"gpu.3.{suffix}") is Kind.MEASUREMENT, suffix
    for name in ("slowdown", "shutdown", "gpu_max"):
        for key in (f"gpu.3.temperature.{name}", f"gpu.3.temperature.{name}_tlimit"):
            assert shipped.kind_of(key) is Kind.CONFIGURATION, key


def test_check_says_why_a_threshold_rule_did_not_apply(tmp_path: Path) -> None:
    """A review: `check` of an import whose -q prints the slowdown threshold only relative
    to T.Limit listed GPU018 under 'did not apply here (no such evidence in the source)',
    though the source did print it; that line is now only of what the source does not
    hold, and GPU018 is on the line of what it gives as unsupported."""
    from gpudiag import cli
    from gpudiag.session import format_not_applicable
    from gpudiag.snapshot import load

    out = tmp_path / "h100.json"
    source = realdata_dir() / "h100-vm" / "nvidia-smi-q.txt"
    assert cli.main(["import", str(source), "-o", str(out)]) == 0
    lines = format_not_applicable(load(out).findings)
    absent, given = lines
    assert absent.startswith("did not apply here (no such evidence in the source): ")
    assert "GPU018" not in absent.split() and "CPU001" in absent.split()
    assert "unsupported" in given and "GPU018" in given.split()
