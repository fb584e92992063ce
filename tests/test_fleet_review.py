"""Defects a new user's review found in `gpudiag fleet` (round 8): each test fails on the
code before its fix."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from gpudiag.fleet.analysis import analyse
from gpudiag.fleet.load import load_fleet
from gpudiag.model import Reading, Snapshot
from gpudiag.snapshot import save

from fleetgen import base_snapshot

MADE_UP = "nvml:nvmlDeviceGetTemperature+nvmlDeviceGetMarginTemperature-nvmlDeviceGetFieldValues"


def older(snapshot: Snapshot) -> Snapshot:
    """The snapshot as a gpudiag before the margin to slowdown wrote it (a303fd8): no
    gpu.N.temperature.slowdown_margin, and the absolute thresholds made up from the
    temperature, the T.Limit margin and the threshold's T.Limit value."""
    probes = []
    for probe in snapshot.probes:
        if probe.name != "gpu":
            probes.append(probe)
            continue
        by_key = {r.key: r for r in probe.readings}
        readings = []
        for r in probe.readings:
            if r.key.endswith(".temperature.slowdown_margin"):
                continue
            gpu, name = r.key.split(".")[1], r.key.rsplit(".", 1)[1]
            if ".temperature." in r.key and name in ("slowdown", "shutdown", "gpu_max"):
                parts = (
                    "temperature.gpu",
                    "temperature.tlimit_margin",
                    f"temperature.{name}_tlimit",
                )
                t, margin, tlimit = (by_key[f"gpu.{gpu}.{p}"].value for p in parts)
                r = Reading(r.key, t + margin - tlimit, "C", MADE_UP)
            readings.append(r)
        probes.append(replace(probe, readings=tuple(readings)))
    return replace(snapshot, probes=tuple(probes))


def _write(folder: Path, snapshot: Snapshot, hosts: list[str]) -> None:
    folder.mkdir(exist_ok=True)
    for host in hosts:
        save(replace(snapshot, host=host), folder / f"{host}.json")


def test_fleet_upgrades_an_older_snapshot_as_check_and_diff_do(tmp_path: Path) -> None:
    """Review point 1: two older exports of the same node as three current ones are one
    configuration group, nothing odd: the fleet's loader brings them to what the producers
    now record (gpudiag/upgrade.py), as `check` and `diff` do; and so does --dataset."""
    base = base_snapshot()
    old = older(base)
    assert "gpu.0.temperature.slowdown_margin" not in old.readings_by_key
    _write(tmp_path / "fleet", base, ["n1", "n2", "n3"])
    _write(tmp_path / "fleet", old, ["o1", "o2"])
    loaded = load_fleet([tmp_path / "fleet"], workers=1)
    report = analyse(loaded)
    assert [g.nodes for g in report.groups] == [["n1", "n2", "n3", "o1", "o2"]]
    assert report.exit_code() == 0 and not report.odd_nodes()
    # --dataset appends what the loader read: the rows hold the upgraded readings
    from gpudiag.fleet.dataset import append_dataset
    from gpudiag.fleet.dataset_read import read_into
    from gpudiag.fleet.records import LoadedFleet

    assert append_dataset(loaded, str(tmp_path / "dataset")) == 5
    again = LoadedFleet()
    read_into(again, [str(tmp_path / "dataset")])
    assert [g.nodes for g in analyse(again).groups] == [["n1", "n2", "n3", "o1", "o2"]]
