"""The history of nodes snapshotted a few times: kernel metrics that got slower between
runs (the diff's interval test, with a minimum effect), and counters since boot that rose.
Nodes with a longer history are searched for change points (changes.py)."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

from gpudiag import shipped
from gpudiag.diff import bootstrap_ratio, kernel_match_key, verdict
from gpudiag.fleet.records import NodeRun
from gpudiag.fleet.table import Fleet


@dataclass
class Regression:
    """A node's kernel metric that got slower between two of its runs."""

    node: str
    metric: str
    device: str
    unit: str
    started: str
    previous: str
    ratio: float
    ci_low: float
    ci_high: float


@dataclass(frozen=True)
class RisingCounter:
    """A counter since boot (declared in gpudiag/catalog.py) that rose between two
    consecutive snapshots of one node: errors that happened in between."""

    node: str
    reading: str
    before: float
    after: float
    previous: str  # when the earlier snapshot was taken
    seen: str  # when the later one was


def regressions(
    fleet: Fleet, min_pct: float = 0.0, max_runs: int | None = None
) -> list[Regression]:
    """Kernel metrics that got slower between consecutive runs of a node (the diff's
    interval test) by at least `min_pct` percent; the first such run is when it started.
    Nodes with `max_runs` runs or more are left to the change points (changes.py): the
    test of each pair of runs, without a model of run-to-run drift, calls most runs of a
    long history slower than the one before."""
    found = []
    for host, runs in fleet.history.items():
        if len(runs) < 2 or (max_runs is not None and len(runs) >= max_runs):
            continue
        reported: set[tuple[str, ...]] = set()
        for before, after in pairwise(runs):
            earlier = {kernel_match_key(k): k for k in before.kernels}
            for k in after.kernels:
                key = kernel_match_key(k)
                old = earlier.get(key)
                if key in reported or old is None or len(old.samples) < 2 or len(k.samples) < 2:
                    continue
                try:
                    ratio, low, high = bootstrap_ratio(list(old.samples), list(k.samples))
                except ValueError:
                    continue
                if verdict(low, high, k.unit) == "slower" and abs(ratio - 1.0) >= min_pct / 100:
                    reported.add(key)
                    dtype = dict(k.params).get("dtype")
                    found.append(
                        Regression(
                            host,
                            f"{k.kernel}.{k.metric}" + (f".{dtype}" if dtype else ""),
                            k.device,
                            k.unit,
                            after.created,
                            before.created,
                            ratio,
                            low,
                            high,
                        )
                    )
    return found


def rising_counters(fleet: Fleet) -> list[RisingCounter]:
    """Counters since boot that rose between consecutive snapshots of a node (a reboot
    between them resets them: a counter that fell is not reported)."""
    counters: dict[int, dict[str, int]] = {}

    def positions(run: NodeRun) -> dict[str, int]:
        if run.layout not in counters:
            layout = fleet.loaded.layouts[run.layout]
            counters[run.layout] = {
                layout.keys[p]: i
                for i, p in enumerate(layout.numeric)
                if shipped.is_counter(layout.keys[p])
            }
        return counters[run.layout]

    found = []
    for host, runs in fleet.history.items():
        for before, after in pairwise(runs):
            earlier = positions(before)
            for key, i in positions(after).items():
                j = earlier.get(key)
                if j is None:
                    continue
                old, new = float(before.numbers[j]), float(after.numbers[i])
                if new > old:  # NaN (not read) on either side compares False
                    found.append(RisingCounter(host, key, old, new, before.created, after.created))
    return found
