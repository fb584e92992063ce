"""Issue 42's fleet over time for `gpudiag goodput` (tests/test_goodput.py): snapshots of
every node a day with failures planted at known rates; beside tests/fleetgen.py, whose
base snapshot it changes."""

from __future__ import annotations

import copy
import functools
import json
import random
import re
import tempfile
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from gpudiag.snapshot import save

from fleetgen import GPUS, base_snapshot

# ------------------------------------------------------------------ a failure history
#
# Issue 42's fleet over time: one snapshot of every node a day, and incidents planted at
# known rates, two causes: a GPU lost (gpu.N.health in error, back the next day; each
# loss on another GPU than the last) and a hardware Xid (faults.xid.79.count one higher).
# Each node-day holds at most one incident (none, one cause or the other, drawn together),
# so a planted rate is the chance of that cause on a node-day. One node, the lemon, has
# every rate times `factor`. The snapshots are the demo node's JSON with those readings
# changed (its findings as they are: nothing new is critical).

FAILURE_START = "2026-09-01T00:00:00+00:00"


@dataclass
class PlantedFailures:
    """Which incident each node had on each day (None: none), the lemon node, the
    planted rates per node-day, and the lemon's factor."""

    events: dict[str, list[str | None]]
    lemon: str
    rates: dict[str, float]
    factor: float

    def fleet_rate(self, cause: str) -> float:
        """The rate per 1000 node-days the whole fleet should show for a cause."""
        nodes = len(self.events)
        return self.rates[cause] * (nodes - 1 + self.factor) / nodes * 1000


def planted_failures(
    seed: int,
    nodes: int = 20,
    days: int = 60,
    rates: dict[str, float] | None = None,
    factor: float = 5.0,
) -> PlantedFailures:
    """`nodes` nodes fail0001... over `days` days; the lemon drawn with the seed."""
    rng = random.Random(seed * 4201 + 42)
    rates = rates or {"gpu_lost": 0.03, "xid_hardware": 0.04}
    names = [f"fail{n:04d}" for n in range(1, nodes + 1)]
    lemon = rng.choice(names)
    events: dict[str, list[str | None]] = {}
    for name in names:
        scale = factor if name == lemon else 1.0
        day: list[str | None] = []
        for _ in range(days):
            draw, found = rng.random(), None
            for cause, rate in rates.items():
                draw -= rate * scale
                if draw < 0:
                    found = cause
                    break
            day.append(found)
        events[name] = day
    return PlantedFailures(events, lemon, dict(rates), factor)


def _failure_days(planted: PlantedFailures, name: str) -> list[tuple[str, int | None, int]]:
    """Per snapshot of a node (day 0 to the last): its time, the GPU lost (or None) and
    the Xid 79 count."""

    start = datetime.fromisoformat(FAILURE_START)
    xid, lost_count = 1, 0  # the demo node has had one Xid 79 already
    out = [(start.isoformat(), None, xid)]
    for day, event in enumerate(planted.events[name], start=1):
        gpu = None
        if event == "gpu_lost":
            gpu = lost_count % GPUS
            lost_count += 1
        elif event == "xid_hardware":
            xid += 1
        out.append(((start + timedelta(days=day)).isoformat(), gpu, xid))
    return out


def failure_states(planted: PlantedFailures) -> dict[str, list[Any]]:
    """The histories goodput's rates read (NodeState per snapshot), made straight from
    the plan: what write_failure_history's files should load as (a test checks)."""

    from gpudiag.fleet.goodput import NodeState

    base = {(r, s, subject) for r, s, subject in _base_findings() if s == "critical"}
    critical = frozenset((r, subject) for r, _, subject in base)
    out = {}
    for name in planted.events:
        out[name] = [
            NodeState(
                datetime.fromisoformat(created),
                frozenset() if gpu is None else frozenset({f"gpu.{gpu}"}),
                _xid_state(xid),
                _base_memory(),
                (),
                float(GPUS * 18),  # the files change gpu.N.health only
                critical,
            )
            for created, gpu, xid in _failure_days(planted, name)
        ]
    return out


@functools.cache
def _base_json() -> dict[str, Any]:
    """fleetgen's base snapshot as the JSON a file holds (built once per process)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "base.json"
        save(base_snapshot(), path)
        return json.loads(path.read_text())


def _base_findings() -> list[tuple[str, str, str]]:
    return [(f["rule_id"], f["severity"], f["subject"]) for f in _base_json()["findings"]]


@functools.cache
def _xid_state(xid79: int) -> tuple[tuple[str, float], ...]:
    """NodeState's xid field at this Xid 79 count (built once per count)."""
    return tuple(sorted(_base_xids(xid79).items()))


def _base_xids(xid79: int) -> dict[str, float]:
    out = dict(_base_xid_counts())
    out["faults.xid.79.count"] = float(xid79)
    return out


@functools.cache
def _base_xid_counts() -> tuple[tuple[str, float], ...]:
    from gpudiag.fleet.goodput import HARDWARE_XIDS

    out = {}
    for probe in _base_json()["probes"]:
        for r in probe["readings"]:
            parts = r["key"].split(".")
            if (
                r["key"].startswith("faults.xid.")
                and parts[-1] == "count"
                and int(parts[2]) in HARDWARE_XIDS
            ):
                out[r["key"]] = float(r["value"])
    return tuple(out.items())


@functools.cache
def _base_memory() -> tuple[tuple[str, float], ...]:

    pattern = re.compile(
        r"^(gpu\.\d+\.(ecc\.volatile\.uncorrected|remapped_rows\.uncorrectable"
        r"|retired_pages\.double_bit)|faults\.edac\.uncorrectable)$"
    )
    return tuple(
        (r["key"], float(r["value"]))
        for probe in _base_json()["probes"]
        for r in probe["readings"]
        if pattern.match(r["key"]) and r["status"] == "ok"
    )


def write_failure_history(directory: Path, planted: PlantedFailures) -> int:
    """Every node's daily snapshots as JSON (NODE-DAY.json); how many files."""
    import json

    base = copy.deepcopy(_base_json())
    where: dict[str, dict[str, Any]] = {}
    for probe in base["probes"]:
        for r in probe["readings"]:
            if r["key"] == "faults.xid.79.count" or (
                r["key"].startswith("gpu.") and r["key"].endswith(".health")
            ):
                where[r["key"]] = r
            elif r["key"] == "host.hostname":
                where["host.hostname"] = r
    healthy = {key: dict(r) for key, r in where.items()}
    written = 0
    for name in planted.events:
        for day, (created, gpu, xid) in enumerate(_failure_days(planted, name)):
            for key, r in where.items():
                r.clear()
                r.update(healthy[key])
            where["host.hostname"]["value"] = name
            where["faults.xid.79.count"]["value"] = xid
            if gpu is not None:
                health = where[f"gpu.{gpu}.health"]
                health.pop("value", None)
                health.update(status="error", reason="GpuIsLost")
            base["host"], base["created"] = name, created
            (directory / f"{name}-{day:03d}.json").write_text(json.dumps(base))
            written += 1
    return written
