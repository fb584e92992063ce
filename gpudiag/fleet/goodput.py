"""Failure rates from the fleet's own history, for `gpudiag goodput`: every node's
snapshots in time order (as fleet/load.py's load_fleet returns them), each consecutive
pair an observed interval, each interval at most one incident, by cause.

An incident is what rose between two snapshots of a node: a GPU lost (gpu.N.health not
ok, or GPU001) that was not lost before; a hardware Xid's count (the codes of rule GPU027)
that rose; an uncorrectable memory error counter that rose; an InfiniBand link_downed
counter that rose or fewer active NVLinks; or, with none of these, a critical finding
that the node did not have before (what `gpudiag health --for slurm` drains on). An Xid
seen again in the next snapshot is the same Xid (its count has not risen); a counter that
fell (a reboot) is not an incident. One interval holds at most one incident: its cause is
the first of CAUSES that rose, so causes sum to the total. An interval longer than
`max_gap_days` is not observed: neither its time nor what rose in it is counted, and the
report says how many were left out.

Rates are per 1000 node-days with exact (Garwood) Poisson intervals: the total's at 95%;
the causes' simultaneous, all of them together at 95% (Bonferroni: each at 1 - 0.05/k for
the k causes; two independent 95% intervals hold together only ~90% of the time, and a
reader compares the causes). A lemon node is
one whose count is improbable if every node had the fleet's one rate: given the fleet's
incidents, its share is binomial in its share of the node-days (the exact conditional
test), P(X >= count) below 0.01 after Bonferroni's correction for the number of nodes.
"""

from __future__ import annotations

import functools
import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import pairwise
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the fleet's records need the `fleet` extra (msgspec); --rate alone not
    from gpudiag.fleet.records import LoadedFleet, NodeRun

CAUSES = ("gpu_lost", "xid_hardware", "memory", "interconnect", "drained")
CAUSE_TITLES = {
    "gpu_lost": "GPU lost (gpu.N.health, GPU001)",
    "xid_hardware": "hardware Xid (the codes of GPU027)",
    "memory": "uncorrectable memory error (ECC, row remap, retired page, EDAC)",
    "interconnect": "link down (InfiniBand link_downed, fewer active NVLinks)",
    "drained": "a new critical finding, none of the above",
}
# Rule GPU027's hardware Xid codes (rules/gpu.toml; a test checks they agree), from
# NVIDIA's Xid catalogue: 48 DBE, 63/64 row remap, 74 NVLink, 79 off the bus, 92-95 ECC,
# 119/120 GSP.
HARDWARE_XIDS = frozenset({48, 63, 64, 74, 79, 92, 94, 95, 119, 120})
LEMON_P = 0.01
CONFIDENCE = 0.95  # the total's interval, and the causes' jointly
CAUSE_CONFIDENCE = 1.0 - (1.0 - CONFIDENCE) / len(CAUSES)  # each cause's (Bonferroni)
DEFAULT_MAX_GAP_DAYS = 7.0

_XID = re.compile(r"^faults\.xid\.(\d+)\.count$")
_MEMORY = re.compile(
    r"^(gpu\.\d+\.(ecc\.volatile\.uncorrected|remapped_rows\.uncorrectable"
    r"|retired_pages\.double_bit)|faults\.edac\.uncorrectable)$"
)
_LINK_DOWN = re.compile(r"^ib\..+\.link_downed$")
_NVLINK_ACTIVE = re.compile(r"^gpu\.\d+\.nvlink\.active$")
_HEALTH = re.compile(r"^gpu\.(\d+)\.health$")


class RatesError(ValueError):
    """A fleet the rates cannot come from (one line)."""


class NoTimeSpan(RatesError):
    """A fleet with no node observed over time: no rate comes from it (--rate can still be
    used)."""


@dataclass(frozen=True)
class NodeState:
    """What one snapshot says about failures: the GPUs lost, the counters that can rise
    (a hardware Xid key absent reads as 0), the active NVLinks, the critical findings."""

    time: datetime
    lost: frozenset[str] = frozenset()
    xid: tuple[tuple[str, float], ...] = ()
    memory: tuple[tuple[str, float], ...] = ()
    link_down: tuple[tuple[str, float], ...] = ()
    nvlink_active: float = math.nan
    critical: frozenset[tuple[str, str]] = frozenset()


@dataclass(frozen=True)
class Rate:
    """Incidents over node-days, per 1000 node-days with an interval at `confidence`."""

    count: int
    node_days: float
    per_1000: float
    low: float
    high: float
    confidence: float = CONFIDENCE


@dataclass(frozen=True)
class Lemon:
    """A node whose count the rest of the fleet's rate makes improbable."""

    node: str
    count: int
    expected: float
    node_days: float
    p_adjusted: float


@dataclass
class FleetRates:
    """The fleet's failure rates: the total, by cause, per node; the lemon nodes; what
    was observed and what was left out; whether one rate explains every healthy node."""

    nodes: int
    snapshots: int
    first: str
    last: str
    max_gap_days: float
    total: Rate
    causes: dict[str, Rate]
    per_node: dict[str, tuple[int, float]]  # node -> (incidents, observed days)
    per_node_causes: dict[str, dict[str, int]]
    lemons: list[Lemon]
    gaps_left_out: int = 0
    days_left_out: float = 0.0
    dispersion: tuple[float, int, float] | None = None  # chi-square, df, p (no lemons)
    cause_confidence: float = CAUSE_CONFIDENCE  # each cause's; jointly CONFIDENCE
    notes: list[str] = field(default_factory=list)

    def without(self, nodes: Iterable[str] = (), cause: str | None = None) -> Rate:
        """The total rate without these nodes' incidents and days, or without a cause."""
        left = set(nodes)
        count = sum(c for n, (c, _) in self.per_node.items() if n not in left)
        days = sum(d for n, (_, d) in self.per_node.items() if n not in left)
        if cause is not None:
            count -= sum(
                per.get(cause, 0) for n, per in self.per_node_causes.items() if n not in left
            )
        return rate_of(count, days)


# ------------------------------------------------------------------ Poisson statistics


def _gamma_p(a: float, x: float) -> float:
    """The regularized lower incomplete gamma P(a, x) (series, or Q's continued
    fraction: Numerical Recipes' gammp)."""
    if x <= 0:
        return 0.0
    log_front = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1:
        term = total = 1.0 / a
        n = a
        for _ in range(100000):
            n += 1
            term *= x / n
            total += term
            if abs(term) < abs(total) * 1e-15:
                break
        return min(1.0, total * math.exp(log_front))
    tiny = 1e-300
    b = x + 1 - a
    c = 1 / tiny
    d = 1 / b
    h = d
    for i in range(1, 100000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        delta = d * c
        h *= delta
        if abs(delta - 1) < 1e-15:
            break
    return max(0.0, 1.0 - math.exp(log_front) * h)


def poisson_sf(k: int, mu: float) -> float:
    """P(X >= k) for X ~ Poisson(mu)."""
    return 1.0 if k <= 0 else _gamma_p(k, mu)


def binomial_sf(k: int, n: int, q: float) -> float:
    """P(X >= k) for X ~ Binomial(n, q), summed in logs (n up to a fleet's incidents)."""
    if k <= 0:
        return 1.0
    if k > n or q <= 0.0:
        return 0.0
    if q >= 1.0:
        return 1.0
    log_q, log_r = math.log(q), math.log1p(-q)
    total = 0.0
    for i in range(k, n + 1):
        total += math.exp(
            math.lgamma(n + 1)
            - math.lgamma(i + 1)
            - math.lgamma(n - i + 1)
            + i * log_q
            + (n - i) * log_r
        )
    return min(1.0, total)


def chi2_sf(x: float, df: int) -> float:
    """P(X >= x) for X ~ chi-square with df degrees of freedom."""
    return 1.0 - _gamma_p(df / 2, x / 2)


def _solve(func: Callable[[float], float], target: float, high: float) -> float:
    """The mu in [0, high] where the monotone func(mu) crosses target (bisection, to a
    relative 1e-12)."""
    low, top = 0.0, high
    rising = func(top) > func(low)
    while top - low > 1e-12 * top:
        mid = (low + top) / 2
        if (func(mid) < target) == rising:
            low = mid
        else:
            top = mid
    return (low + top) / 2


@functools.lru_cache(maxsize=4096)
def poisson_interval(count: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The exact (Garwood) interval of a Poisson mean from one count, two-sided at
    `confidence` (memoised: a fleet's counts repeat)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError("confidence must lie between 0 and 1")
    tail = (1.0 - confidence) / 2
    high_bound = count + 20 + 10 * math.sqrt(count + 1) - 10 * math.log10(tail)
    low = 0.0 if count == 0 else _solve(lambda mu: poisson_sf(count, mu), tail, high_bound)
    high = _solve(lambda mu: 1.0 - poisson_sf(count + 1, mu), tail, high_bound)
    return low, high


def rate_of(count: int, node_days: float, confidence: float = CONFIDENCE) -> Rate:
    """`count` incidents over `node_days`, per 1000 node-days with its interval."""
    if node_days <= 0:
        raise NoTimeSpan("no node-days observed: the fleet has no time span")
    low, high = poisson_interval(count, confidence)
    scale = 1000.0 / node_days
    return Rate(count, node_days, count * scale, low * scale, high * scale, confidence)


# ------------------------------------------------------------------ from snapshots


def _when(created: str) -> datetime:
    moment = datetime.fromisoformat(created.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        raise RatesError(f"{created}: a snapshot time without a time zone")
    return moment


def node_state(loaded: LoadedFleet, run: NodeRun) -> NodeState:
    """What one loaded snapshot says about failures (fleet/records.py's NodeRun)."""
    layout = loaded.layouts[run.layout]
    keys, statuses = layout.keys, layout.statuses
    xid, memory, link_down = [], [], []
    active = math.nan
    for slot, position in enumerate(layout.numeric):
        key = keys[position]
        value = float(run.numbers[slot])
        found = _XID.match(key)
        if found:
            if int(found.group(1)) in HARDWARE_XIDS:
                xid.append((key, value))
        elif _MEMORY.match(key):
            memory.append((key, value))
        elif _LINK_DOWN.match(key):
            link_down.append((key, value))
        elif _NVLINK_ACTIVE.match(key) and not math.isnan(value):
            active = value if math.isnan(active) else active + value
    lost = {
        f"gpu.{m.group(1)}"
        for key, status in zip(keys, statuses, strict=True)
        if (m := _HEALTH.match(key)) and status != "ok"
    }
    lost |= {subject for rule, _, subject in run.findings if rule == "GPU001"}
    critical = {
        (rule, subject) for rule, severity, subject in run.findings if severity == "critical"
    }
    return NodeState(
        _when(run.created),
        frozenset(lost),
        tuple(xid),
        tuple(memory),
        tuple(link_down),
        active,
        frozenset(critical),
    )


def histories(loaded: LoadedFleet) -> dict[str, list[NodeState]]:
    """Each node's states in time order (by snapshot time, then path)."""
    runs: dict[str, list[NodeRun]] = defaultdict(list)
    for run in loaded.runs:
        runs[run.host].append(run)
    out = {}
    for host, mine in runs.items():
        mine.sort(key=lambda r: (_when(r.created), r.path))
        out[host] = [node_state(loaded, r) for r in mine]
    return out


def _rose(
    before: Sequence[tuple[str, float]], after: Sequence[tuple[str, float]], absent: float
) -> bool:
    """A counter in `after` above its value in `before` (`absent` where before has none;
    NaN, not read, never rises)."""
    if after == before:  # nothing changed (the common case; NaN differs from itself)
        return False
    earlier = dict(before)
    return any(value > earlier.get(key, absent) for key, value in after)


def causes_between(before: NodeState, after: NodeState) -> list[str]:
    """The causes that rose from one snapshot to the next, in CAUSES' order."""
    found = []
    if after.lost - before.lost:
        found.append("gpu_lost")
    if _rose(before.xid, after.xid, 0.0):
        found.append("xid_hardware")
    if _rose(before.memory, after.memory, math.nan):
        found.append("memory")
    if _rose(before.link_down, after.link_down, math.nan) or (
        after.nvlink_active < before.nvlink_active
    ):
        found.append("interconnect")
    if not found and after.critical - before.critical:
        found.append("drained")
    return found


def fleet_rates(
    states: dict[str, list[NodeState]],
    max_gap_days: float = DEFAULT_MAX_GAP_DAYS,
    nodes_tested: int | None = None,
) -> FleetRates:
    """The rates of a fleet's histories (node -> states in time order)."""
    if not math.isfinite(max_gap_days) or max_gap_days <= 0:
        raise RatesError("the longest gap must be a finite number of days above 0")
    per_node: dict[str, tuple[int, float]] = {}
    per_cause: dict[str, dict[str, int]] = {}
    left_out, days_out = 0, 0.0
    times = [s.time for mine in states.values() for s in mine]
    for node, mine in states.items():
        count, days = 0, 0.0
        causes: dict[str, int] = {}
        for before, after in pairwise(mine):
            gap = (after.time - before.time).total_seconds() / 86400.0
            if gap > max_gap_days:
                left_out += 1
                days_out += gap
                continue
            days += gap
            rose = causes_between(before, after)
            if rose:
                count += 1
                causes[rose[0]] = causes.get(rose[0], 0) + 1
        per_node[node] = (count, days)
        per_cause[node] = causes
    total_days = sum(d for _, d in per_node.values())
    if not times or total_days <= 0:
        raise NoTimeSpan(
            "the fleet has no time span: every node needs two snapshots or more, "
            f"at most {max_gap_days:g} days apart (--max-gap)"
        )
    total_count = sum(c for c, _ in per_node.values())
    causes_rates = {  # simultaneous: jointly at CONFIDENCE
        cause: rate_of(
            sum(per.get(cause, 0) for per in per_cause.values()), total_days, CAUSE_CONFIDENCE
        )
        for cause in CAUSES
    }
    lemons = find_lemons(per_node, nodes_tested)
    rates = FleetRates(
        nodes=len(states),
        snapshots=len(times),
        first=min(times).isoformat(),
        last=max(times).isoformat(),
        max_gap_days=max_gap_days,
        total=rate_of(total_count, total_days),
        causes=causes_rates,
        per_node=per_node,
        per_node_causes=per_cause,
        lemons=lemons,
        gaps_left_out=left_out,
        days_left_out=days_out,
    )
    rates.dispersion = dispersion(per_node, {lemon.node for lemon in lemons})
    return rates


def find_lemons(per_node: dict[str, tuple[int, float]], tested: int | None = None) -> list[Lemon]:
    """Nodes whose count is improbable under one rate for the whole fleet (the binomial
    conditional test; Bonferroni over the nodes tested), worst first; `expected` is what
    the rest of the fleet's rate gives over the node's days."""
    tested = tested or sum(1 for _, d in per_node.values() if d > 0)
    total_count = sum(c for c, _ in per_node.values())
    total_days = sum(d for _, d in per_node.values())
    found = []
    for node, (count, days) in per_node.items():
        rest_days = total_days - days
        if days <= 0 or rest_days <= 0 or count == 0:
            continue
        expected = (total_count - count) / rest_days * days
        # one rate for all (the null): given the fleet's incidents, the node's share of them
        # is binomial in its share of the node-days, whatever the rate (the exact
        # conditional test; against the rest's rate, a fleet whose other nodes had none
        # made one incident a lemon at p = 0)
        p = min(1.0, binomial_sf(count, total_count, days / total_days) * tested)
        if p < LEMON_P:
            found.append(Lemon(node, count, expected, days, p))
    return sorted(found, key=lambda lemon: (lemon.p_adjusted, lemon.node))


def dispersion(
    per_node: dict[str, tuple[int, float]], leave_out: set[str]
) -> tuple[float, int, float] | None:
    """Whether one rate explains every node but the lemons: Pearson's chi-square of the
    counts against the pooled rate over each node's days, its degrees of freedom and
    p-value; None with fewer than two nodes or no incident."""
    kept = [(c, d) for n, (c, d) in per_node.items() if n not in leave_out and d > 0]
    count = sum(c for c, _ in kept)
    days = sum(d for _, d in kept)
    if len(kept) < 2 or count == 0:
        return None
    rate = count / days
    statistic = sum((c - rate * d) ** 2 / (rate * d) for c, d in kept)
    df = len(kept) - 1
    return statistic, df, chi2_sf(statistic, df)
