"""Comparing two snapshots: "node B is slower than node A: what is different, and which
differences explain it?"

Readings are matched by key, with GPUs matched by PCI bus address where both sides have
one (so a node whose GPUs enumerate in another order still lines up). Findings present on
one side only are listed. The readings derived from kernel results are not compared as
readings: kernel metrics with samples on both sides get the ratio of
medians B/A with a 95% bootstrap confidence interval, and a verdict (`judge_metric`) that
calls a difference only when the interval excludes 1 by more than MIN_EFFECT and both
sides have enough samples with a small enough spread; "no significant difference" only
when the whole interval lies within MIN_EFFECT of 1; otherwise "inconclusive", with the
reason (too few samples, too noisy, interval too wide). Inconclusive never raises the
exit code. Configuration differences known to
move a metric (rules/explanations.toml) are listed beside it. Readings that always differ
(serials, UUIDs, clocks at idle, free memory) are hidden unless asked for; a change of a
verdict on a part (a GPU's health: lost) never is, leads the report and is exit code 2,
and a GPU lost on one side is one line, not its hundreds of failed readings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpudiag import catalog, diff_keys, shipped
from gpudiag.catalog import natural_key
from gpudiag.diff_keys import COUNTER, GPU, HEALTH, NOISY, PAIR, VERDICT
from gpudiag.diff_keys import VERDICT_TEMPLATES as VERDICT_TEMPLATES
from gpudiag.model import Finding, KernelResult, Reading, ReadingStatus, Severity, Snapshot

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from typing import Any

    from gpudiag.diff_kernels import Explanation, MetricChange

EXIT_EQUIVALENT, EXIT_CONFIG, EXIT_PERFORMANCE = 0, 1, 2
BOOTSTRAP_ROUNDS = 2000
# A difference smaller than this share of A is not called, however tight the interval.
MIN_EFFECT = 0.03
# Fewer samples a side than this, or a coefficient of variation above MAX_CV on either
# side, and no verdict is given: the interval of a median from a few noisy trials moves
# by more than the effects worth calling (two idle quick runs 12 s apart gave 0.37x).
MIN_SAMPLES = 5
MAX_CV = 0.10
RELIABLE_SAMPLES = 30  # from this many a side, the interval itself carries the spread
SIGNIFICANT = ("faster", "slower")
# VERDICT_TEMPLATES (gpudiag/diff_keys.py): the readings whose change is a verdict on a
# part (a GPU's health), never hidden


@dataclass(frozen=True)
class ReadingChange:
    """One key compared: equal, changed, only on A, only on B."""

    key: str
    kind: str
    a: Reading | None
    b: Reading | None
    noisy: bool = False

    @property
    def relative_change(self) -> float | None:
        """(B - A) / A for two numbers, else None."""
        numbers = _numbers(self)
        if numbers is None or numbers[0] == 0:
            return None
        x, y = numbers
        return (y - x) / abs(x)

    @property
    def group(self) -> str:
        """What the key is about, as findings name it ('GPU 3' for its NVLinks too, 'PCIe
        0000:18:00.0', 'IB mlx5_0 port 1'), 'topology' for the GPU pairs, else 'node'."""
        return diff_keys.group(self.key)


def _change(
    key: str, kind: str, a: Reading | None, b: Reading | None, noisy: bool
) -> ReadingChange:
    """ReadingChange(key, kind, a, b, noisy), made without the frozen __init__'s setattr
    per field (a diff makes one for every key: 26,000 at 64 GPUs); the same object
    (test_diff holds them equal)."""
    change = _NEW(ReadingChange)
    _SET(change, "__dict__", {"key": key, "kind": kind, "a": a, "b": b, "noisy": noisy})
    return change


_NEW, _SET = object.__new__, object.__setattr__


def __getattr__(name: str) -> Any:
    """MetricChange and Explanation, still named here (gpudiag/diff_kernels.py holds
    them: built only where kernel results are compared or explanations read)."""
    if name in ("MetricChange", "Explanation"):
        from gpudiag import diff_kernels

        return getattr(diff_kernels, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass
class Diff:
    """Everything that differs between snapshot A and snapshot B."""

    readings: list[ReadingChange] = field(default_factory=list)
    findings_only_a: list[Finding] = field(default_factory=list)
    findings_only_b: list[Finding] = field(default_factory=list)
    metrics: list[MetricChange] = field(default_factory=list)
    gpu_map: dict[str, str] = field(default_factory=dict)
    same_node: bool = False  # A and B are one node at two moments (same host name)
    # what diff_snapshots' one pass over the keys gathers (None: walk `readings`): the
    # changes that are not equal, those of them of verdicts, and each GPU's count of its
    # readings by kind (only_a, only_b, equal, changed), its health reading left out
    _unequal: list[ReadingChange] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    _verdicts: list[ReadingChange] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    _sides: dict[str, list[int]] | None = field(default=None, init=False, repr=False, compare=False)
    # what `readings` is made from when first asked, where diff_snapshots left its equal
    # changes to be made then (None: `readings` is made)
    _later: tuple | None = field(default=None, init=False, repr=False, compare=False)

    def __getattr__(self, name: str) -> Any:
        """`readings`, made when first asked where diff_snapshots left it to be: a diff
        whose report is printed never asks it of its equal changes (26,000 objects at 64
        GPUs, 16 ms); the TUI and a program do, and get the same list."""
        later = self.__dict__.get("_later")
        if name != "readings" or later is None:
            raise AttributeError(name)
        keys, infos, get_a, get_b = later
        unequal = iter(self._unequal or ())
        waiting = next(unequal, None)
        readings: list[ReadingChange] = []
        for key, got in zip(keys, infos, strict=True):
            if got[0]:  # KERNEL
                continue
            if waiting is not None and waiting.key == key:
                readings.append(waiting)
                waiting = next(unequal, None)
            else:
                readings.append(_change(key, "equal", get_a(key), get_b(key), got[1]))
        self.readings, self._later = readings, None
        return readings

    def rising_counters(self) -> list[ReadingChange]:
        """Counters since boot (declared in gpudiag/catalog.py) higher in B than in A, for
        two snapshots of the same node: errors that happened between them."""
        if not self.same_node:
            return []
        info = diff_keys.info
        return [
            c
            for c in self._not_equal()
            if c.kind == "changed"
            and info(c.key)[COUNTER]
            and (numbers := _numbers(c)) is not None
            and numbers[1] > numbers[0]
        ]

    def _not_equal(self) -> list[ReadingChange]:
        """The changes that are not equal, in order."""
        if self._unequal is not None:
            return self._unequal
        return [c for c in self.readings if c.kind != "equal"]

    def health_changes(self) -> list[ReadingChange]:
        """The changes of verdict-like readings (VERDICT_TEMPLATES: a GPU's health), which
        lead the report and make it exit code 2."""
        if self._verdicts is not None:
            return list(self._verdicts)
        return [c for c in self._not_equal() if is_verdict(c.key)]

    def lost_gpus(self) -> dict[str, str]:
        """GPUs lost on one side only (their health reading taken and failed there, as
        catalog.is_lost reads it): index -> the side, 'A' or 'B'."""
        lost: dict[str, str] = {}
        for c in self.health_changes():
            got = diff_keys.info(c.key)
            if got[HEALTH]:
                in_a, in_b = _is_lost(c.a), _is_lost(c.b)
                if in_a != in_b:
                    lost[got[GPU]] = "A" if in_a else "B"
        return lost

    def differences(self, include_noisy: bool = False) -> list[ReadingChange]:
        """The reading changes that are not equal (noisy ones only on request)."""
        unequal = self._not_equal()
        return list(unequal) if include_noisy else [c for c in unequal if not c.noisy]

    def exit_code(self) -> int:
        """0 equivalent, 1 configuration differs only, 2 a performance metric differs
        significantly or one side has a critical finding the other lacks."""
        if any(m.verdict in SIGNIFICANT for m in self.metrics):
            return EXIT_PERFORMANCE
        if self.health_changes():
            return EXIT_PERFORMANCE
        critical = Severity.CRITICAL
        if any(f.severity is critical for f in self.findings_only_a + self.findings_only_b):
            return EXIT_PERFORMANCE
        if self.differences() or self.findings_only_a or self.findings_only_b:
            return EXIT_CONFIG
        return EXIT_EQUIVALENT

    def verdict_line(self, include_noisy: bool = False) -> str:
        """'configuration differs: 12 readings differ, 0 findings only in A, 3 only in B,
        2 metrics compared': the first line of the report and of the diff screen."""
        verdict = VERDICT_WORDS[self.exit_code()]
        return (
            f"{verdict}: {len(self.differences(include_noisy))} readings differ, "
            f"{len(self.findings_only_a)} findings only in A, "
            f"{len(self.findings_only_b)} only in B, {len(self.metrics)} metrics compared"
        )

    def one_sided_gpus(self) -> dict[str, tuple[str, int]]:
        """GPUs whose every reading is on one side only (removed), or that are lost on one
        side (`lost_gpus`: the other side may still hold their failed readings): index ->
        (the side they answer on, 'only_a' or 'only_b'; how many of their readings differ),
        said in one line rather than reading by reading. The health reading (`folded`
        keeps it) says the GPU is lost on the other side."""
        sides = self._sides if self._sides is not None else _tally(self.readings)
        whole: dict[str, tuple[str, int]] = {}
        counts: dict[str, int] = {}
        for gpu, (only_a, only_b, equal, changed) in sides.items():
            counts[gpu] = only_a + only_b + changed
            if not (equal or changed) and not (only_a and only_b):
                whole[gpu] = ("only_a" if only_a else "only_b", counts[gpu])
        for gpu, side in self.lost_gpus().items():
            whole.setdefault(gpu, ("only_a" if side == "B" else "only_b", counts.get(gpu, 0)))
        return whole


KINDS = ("only_a", "only_b", "equal", "changed")  # by their number in Diff._sides


def _tally(readings: list[ReadingChange]) -> dict[str, list[int]]:
    """Diff._sides of a list of changes: each GPU's count of its readings by kind."""
    sides: dict[str, list[int]] = {}
    info = diff_keys.info
    for c in readings:
        got = info(c.key)
        if got[GPU] is not None and not got[HEALTH]:
            sides.setdefault(got[GPU], [0, 0, 0, 0])[KINDS.index(c.kind)] += 1
    return sides


def folded(change: ReadingChange, whole: dict[str, tuple[str, int]]) -> bool:
    """Whether a reading change is one of a one-sided GPU's (`Diff.one_sided_gpus`) or of
    a topology pair with it, said in that GPU's one line; its health reading never is."""
    got = diff_keys.info(change.key)
    if (pair := got[PAIR]) is not None:
        return any(gpu in whole for gpu in pair)
    return got[GPU] in whole and not got[HEALTH]


def is_verdict(key: str) -> bool:
    """Whether a reading is a verdict on a part (VERDICT_TEMPLATES)."""
    return diff_keys.info(key)[VERDICT]


def _is_lost(reading: Reading | None) -> bool:
    """A health reading taken and failed (catalog.is_lost): the GPU stopped answering."""
    return (
        reading is not None and not reading.ok and reading.status is not ReadingStatus.NOT_REACHED
    )


VERDICT_WORDS = {0: "equivalent", 1: "configuration differs", 2: "performance or health differs"}


def match_gpus(a: dict[str, Reading], b: dict[str, Reading]) -> dict[str, str]:
    """B's GPU index -> A's, by PCI bus address where both sides know it for every GPU;
    else by index."""

    def bus_ids(readings: dict[str, Reading]) -> dict[str, str]:
        return {
            str(catalog.gpu_of(key)): str(r.value)
            for key in _ending(readings, ".pci.bus_id")
            if catalog.gpu_of(key) is not None and (r := readings[key]).ok
        }

    bus_a, bus_b = bus_ids(a), bus_ids(b)
    by_bus_a = {bus: index for index, bus in bus_a.items()}
    if bus_b and all(bus in by_bus_a for bus in bus_b.values()):
        return {index: by_bus_a[bus] for index, bus in bus_b.items()}
    return {}


def _ending(readings: dict[str, Reading], end: str) -> list[str]:
    """The keys that end with `end`, in order: found in their lines joined, by the
    string's own search (a GPU's bus id among 26,000 keys at 64 GPUs: 0.6 ms, where a
    test of each key took 2), unless a key holds a line break (then key by key)."""
    text = "\n".join(readings) + "\n"
    if text.count("\n") != len(readings):
        return [key for key in readings if key.endswith(end)]
    found, mark, at = [], end + "\n", 0
    while (at := text.find(mark, at)) >= 0:
        found.append(text[text.rfind("\n", 0, at) + 1 : at + len(end)])
        at += len(mark)
    return found


def _rekey(readings: dict[str, Reading], gpu_map: dict[str, str]) -> dict[str, Reading]:
    if not gpu_map or all(k == v for k, v in gpu_map.items()):
        return readings
    renumber = diff_keys.renumber  # by each key template's index positions
    return {renumber(key, gpu_map): reading for key, reading in readings.items()}


def bootstrap_ratio(
    a: list[float], b: list[float], rounds: int = BOOTSTRAP_ROUNDS, seed: int = 0
) -> tuple[float, float, float]:
    """Ratio of medians B/A with a 95% percentile-bootstrap confidence interval
    (resampling each side with replacement, `rounds` times, in one numpy pass)."""
    if len(a) < 2 or len(b) < 2:
        raise ValueError("a ratio with a confidence interval needs two samples a side")
    import numpy as np  # only where both sides hold kernel results (most snapshots hold none)

    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    # samples near a float64's largest (a file's 1e308) make an infinite mean of the two
    # middle ones, and an infinite or undefined ratio: that figure, not numpy's warning
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        median_a, median_b = float(np.median(xa)), float(np.median(xb))
        if median_a == 0:
            raise ValueError("median of A is zero")
        rng = np.random.default_rng(seed)
        medians_a = np.median(xa[rng.integers(0, len(xa), size=(rounds, len(xa)))], axis=1)
        medians_b = np.median(xb[rng.integers(0, len(xb), size=(rounds, len(xb)))], axis=1)
        keep = medians_a != 0
        ratios = np.sort(medians_b[keep] / medians_a[keep])
    low = float(ratios[int(0.025 * (len(ratios) - 1))])
    high = float(ratios[int(0.975 * (len(ratios) - 1))])
    return median_b / median_a, low, high


def higher_is_better(unit: str) -> bool:
    """Throughput units (GB/s, TFLOP/s) are better higher; times are better lower."""
    return "/s" in unit or unit.lower() in ("tflops", "gflops", "ops")


def verdict(ratio_low: float, ratio_high: float, unit: str) -> str:
    """faster / slower / no significant difference, from the interval of B/A."""
    if ratio_low <= 1.0 <= ratio_high:
        return "no significant difference"
    increased = ratio_low > 1.0
    return "faster" if increased == higher_is_better(unit) else "slower"


def _cv(samples: list[float]) -> float:
    import statistics  # with its fractions and decimal: only where kernels ran

    mean = statistics.fmean(samples)
    return statistics.stdev(samples) / abs(mean) if mean else float("inf")


def judge_metric(
    a: list[float],
    b: list[float],
    ratio_low: float,
    ratio_high: float,
    unit: str,
    min_effect: float = MIN_EFFECT,
) -> tuple[str, str]:
    """(verdict, reason) for samples A and B whose ratio of medians has the interval
    [ratio_low, ratio_high]: faster or slower only when the interval lies beyond
    1 +- min_effect and both sides have MIN_SAMPLES samples with a CV under MAX_CV (a
    higher CV is allowed from RELIABLE_SAMPLES samples a side, as --until-confident gives);
    "no significant difference" when it lies within 1 +- min_effect; else "inconclusive"
    with the reason. `verdict` (the bare interval test) is unchanged beside it."""
    too_few = [f"{side} has {len(s)}" for side, s in (("A", a), ("B", b)) if len(s) < MIN_SAMPLES]
    if too_few:
        return "inconclusive", (
            f"too few samples ({', '.join(too_few)}; {MIN_SAMPLES} a side needed)"
        )
    noisy = [
        f"{side} cv {cv:.0%}"
        for side, s in (("A", a), ("B", b))
        if (cv := _cv(s)) > MAX_CV and len(s) < RELIABLE_SAMPLES
    ]
    if noisy:
        return "inconclusive", f"too noisy ({', '.join(noisy)}; over {MAX_CV:.0%})"
    if ratio_low > 1.0 + min_effect or ratio_high < 1.0 - min_effect:
        return verdict(ratio_low, ratio_high, unit), ""
    if 1.0 - min_effect <= ratio_low and ratio_high <= 1.0 + min_effect:
        return "no significant difference", ""
    return "inconclusive", (
        f"the interval {ratio_low:.3f}-{ratio_high:.3f} neither excludes nor stays within "
        f"{min_effect:.0%} of 1: more trials would tell"
    )


def load_explanations() -> list[Explanation]:
    """rules/explanations.toml, compiled."""
    from pathlib import Path

    import gpudiag.rules

    path = Path(gpudiag.rules.__file__).with_name("explanations.toml")
    text = path.read_text(encoding="utf-8")
    return parse_explanations(text, "rules/explanations.toml")


def parse_explanations(text: str, origin: str) -> list[Explanation]:
    """An explanations file, compiled; RuleError (one line naming the file) where it is
    not one (`rules lint` checks the shipped file with this)."""
    from gpudiag import tomlcompat
    from gpudiag.diff_kernels import Explanation
    from gpudiag.rule_operators import RuleError  # where explanations are read, not always

    try:
        return [
            Explanation(
                re.compile(entry["metric"]),
                re.compile(entry.get("device", "")),
                tuple(re.compile(p) for p in entry["readings"]),
            )
            for entry in tomlcompat.loads(text).get("explain", [])
        ]
    except (tomlcompat.TOMLDecodeError, KeyError, TypeError, AttributeError, re.error) as exc:
        raise RuleError(f"{origin}: not a valid explanations file: {exc}") from None


_DEVICE_GPU = re.compile(r"^gpu(\d+)$")
_GPU_IN = re.compile(r"(?:^|\.)gpu(\d+)$")
_PEER_GPU = re.compile(r"\.gpu(\d+)$")


def concerns(key: str, gpus: set[str]) -> bool:
    """Whether a reading can bear on a metric of these GPUs: per-GPU readings of other
    GPUs cannot; node-wide ones can."""
    about = shipped.gpus_of(key)
    return not about or any(gpu in gpus for gpu in about)


def kernel_match_key(
    result: KernelResult, gpu_map: dict[str, str] | None = None
) -> tuple[str, ...]:
    """(kernel, device, metric, element type: catalog.kernel_identity), with B's GPU
    indices turned into A's where they differ."""
    kernel, device, metric, dtype = catalog.kernel_identity(result)
    if gpu_map:
        if match := _DEVICE_GPU.match(device):
            device = f"gpu{gpu_map.get(match.group(1), match.group(1))}"
        if match := _PEER_GPU.search(metric):
            metric = f"{metric[: match.start()]}.gpu{gpu_map.get(match.group(1), match.group(1))}"
    return kernel, device, metric, dtype


def _numbers(change: ReadingChange) -> tuple[int | float, int | float] | None:
    """A's and B's values where both were read and are numbers (not booleans)."""
    a, b = change.a, change.b
    if a is None or b is None or not (a.ok and b.ok):
        return None
    x, y = a.value, b.value
    if isinstance(x, bool) or isinstance(y, bool):
        return None
    if isinstance(x, int | float) and isinstance(y, int | float):
        return x, y
    return None


def _always_varies(key: str) -> bool:
    """A reading declared volatile (temperatures, clocks at idle, serials): hidden by
    default. Counters are shown (and rising ones called out); an undeclared key is shown."""
    return diff_keys.info(key)[NOISY]


def diff_snapshots(a: Snapshot, b: Snapshot) -> Diff:
    """Compare two snapshots (A is the reference)."""
    result = Diff()
    readings_a = a.readings_by_key
    result.gpu_map = match_gpus(readings_a, b.readings_by_key)
    result.same_node = a.host == b.host and a.host != "unknown"
    readings_b = _rekey(b.readings_by_key, result.gpu_map)
    _compare(result, readings_a, readings_b)
    # rules that did not apply on one side are no finding there (schema version 2)
    found_a = [f for f in a.findings if f.severity is not Severity.NOT_APPLICABLE]
    found_b = [f for f in b.findings if f.severity is not Severity.NOT_APPLICABLE]
    ids_a = {(f.rule_id, f.subject) for f in found_a}
    ids_b = {(f.rule_id, f.subject) for f in found_b}
    result.findings_only_a = [f for f in found_a if (f.rule_id, f.subject) not in ids_b]
    result.findings_only_b = [f for f in found_b if (f.rule_id, f.subject) not in ids_a]
    kernels_b = {kernel_match_key(k, result.gpu_map): k for k in b.kernels}
    explanations = load_explanations() if a.kernels else []
    # what explanations.toml names explains a metric whether it is configuration or moves
    # with the load (throttle reasons)
    config = result.differences(include_noisy=True)
    if a.kernels:  # what judging kernel metrics needs, only where there are some
        import statistics

        from gpudiag.diff_kernels import MetricChange
        from gpudiag.stats import samples_verdict
    for ka in a.kernels:
        kb = kernels_b.get(kernel_match_key(ka))
        if kb is None or len(ka.samples) < 2 or len(kb.samples) < 2:
            continue
        try:
            ratio, low, high = bootstrap_ratio(list(ka.samples), list(kb.samples))
        except ValueError:
            continue
        name = f"{ka.kernel}.{ka.metric}"
        gpus = {m.group(1) for text in (ka.device, ka.metric) if (m := _GPU_IN.search(text))}
        related = [
            c
            for c in config
            for e in explanations
            if e.metric.search(name)
            and e.device.search(ka.device)
            and any(p.search(c.key) for p in e.readings)
            and (not gpus or concerns(c.key, gpus))
        ]
        judged, reason = judge_metric(list(ka.samples), list(kb.samples), low, high, ka.unit)
        result.metrics.append(
            MetricChange(
                ka.kernel,
                ka.device,
                ka.metric,
                ka.unit,
                statistics.median(ka.samples),
                statistics.median(kb.samples),
                ratio,
                low,
                high,
                judged,
                tuple({c.key: c for c in related}.values()),  # each reading once
                reason,
                samples_verdict(ka.samples, kb.samples, higher_is_better(ka.unit)),
            )
        )
    return result


def _compare(result: Diff, readings_a: dict[str, Reading], readings_b: dict[str, Reading]) -> None:
    """One pass over the keys of both sides, in order: each compared (equal when status,
    value and unit are), with what the report asks of the changes gathered as it goes
    (Diff._unequal, _verdicts, _sides); each key's questions answered by its template
    (diff_keys.info). Kernel figures are left out: their results' samples are compared.
    The equal changes are made when `readings` is first asked (Diff.__getattr__)."""
    get_a, get_b = readings_a.get, readings_b.get
    unequal: list[ReadingChange] = []
    verdicts: list[ReadingChange] = []
    sides: dict[str, list[int]] = {}
    new, setattr_, known = _NEW, _SET, diff_keys.INFO
    last, tally = None, [0, 0, 0, 0]  # the GPU of the key before, and its counts
    # every key once, in order: A's in its file's order (runs the sort finds already in
    # order, where a set of them has none: half the time) and B's that A lacks
    keys = [*readings_a, *(readings_b.keys() - readings_a.keys())]
    keys.sort()
    infos = diff_keys.infos(keys)
    for key, got in zip(keys, infos, strict=True):
        if got[0]:  # KERNEL
            continue
        ra, rb = get_a(key), get_b(key)
        if ra is not None and rb is not None:  # what (status, value, unit) == (...) gives
            x, y = ra.value, rb.value
            if (
                ((s := ra.status) is (t := rb.status) or s == t)
                and (x is y or x == y)
                and ((u := ra.unit) is (v := rb.unit) or u == v)
            ):
                number = 2  # equal
            else:
                kind, number = "changed", 3
        elif ra is None:
            kind, number = "only_b", 1
        else:
            kind, number = "only_a", 0
        if number != 2:  # an equal change is made when `readings` is first asked
            change = new(ReadingChange)  # as _change makes it
            setattr_(
                change, "__dict__", {"key": key, "kind": kind, "a": ra, "b": rb, "noisy": got[1]}
            )
            unequal.append(change)
            known[key] = got  # kept for the report, which asks again of these
            if got[2]:  # VERDICT
                verdicts.append(change)
        if (gpu := got[4]) is not None and not got[5]:  # a GPU's reading, not its health
            if gpu is not last:  # keys in order come GPU by GPU
                last, tally = gpu, sides.get(gpu)
                if tally is None:
                    tally = sides[gpu] = [0, 0, 0, 0]
            tally[number] += 1
    result._unequal, result._verdicts, result._sides = unequal, verdicts, sides
    result._later = (keys, infos, get_a, get_b)
    del result.readings  # made from _later when first asked (Diff.__getattr__)


# ------------------------------------------------------------------ reports


def _value(reading: Reading | None) -> str:
    return "-" if reading is None else reading.display()


def report_text(
    diff: Diff,
    a: Snapshot,
    b: Snapshot,
    include_noisy: bool = False,
    markdown: bool = False,
    names: tuple[str, str] | None = None,
    width: int | None = None,
) -> str:
    """A plain-text (or markdown) report of the differences: the verdict first, then
    which file is A and which B (`names`; two exports of one demo share a host name).
    The text wraps at `width` (a terminal's), each line under a hanging indent."""
    from gpudiag.termtext import wrap

    lines: list[str] = []
    name_a, name_b = names or (a.host, b.host)
    sides = [f"A: {name_a} ({a.host}, {a.created})", f"B: {name_b} ({b.host}, {b.created})"]
    verdict = diff.verdict_line(include_noisy)
    if markdown:
        lines.append(f"# gpudiag diff\n\n{verdict}\n\n" + "  \n".join(sides) + "\n")
    else:
        lines += wrap(verdict, width)
        lines += [part for side in sides for part in wrap(side, width, 3)]
    header = len(lines)
    if diff.gpu_map and any(k != v for k, v in diff.gpu_map.items()):
        pairs = ", ".join(f"B GPU {k} = A GPU {v}" for k, v in sorted(diff.gpu_map.items()))
        lines += wrap(f"GPUs matched by bus address: {pairs}", None if markdown else width)
    whole, lost = diff.one_sided_gpus(), diff.lost_gpus()
    info = diff_keys.info
    held = {  # lost GPUs whose failed readings the other side still holds
        got[GPU]
        for c in (diff._not_equal() if lost else ())
        if c.kind == "changed" and (got := info(c.key))[GPU] in lost and not got[HEALTH]
    }
    # a lost GPU's other verdicts (its recovery action, failed too) go into its one line
    health = [c for c in diff.health_changes() if not folded(c, whole)]
    if health:  # a GPU lost or recovered: the news, first
        lines.append("\n## Health\n" if markdown else "\nHealth (A -> B):")
        for c in health:
            said = f"{c.key}: {_value(c.a)} -> {_value(c.b)}"
            got = info(c.key)
            if got[GPU] in lost and got[HEALTH]:
                said += f" (lost in {lost[got[GPU]]})" if markdown else ""
            lines.append(f"- {c.group}: {said}" if markdown else f"  {c.group}: {said}")
    if diff.metrics:
        heading = f"\nPerformance (B/A, 95% CI; under {MIN_EFFECT:.0%} not called):"
        lines.append("\n## Performance\n" if markdown else heading)
        if markdown:
            lines.append("| metric | device | A | B | B/A | 95% CI | verdict |")
            lines.append("| --- | --- | --- | --- | --- | --- | --- |")
        for m in diff.metrics:
            cells = (
                f"{m.kernel}.{m.metric}",
                m.device,
                f"{m.median_a:g} {m.unit}",
                f"{m.median_b:g} {m.unit}",
                f"{m.ratio:.3f}",
                f"{m.ci_low:.3f}-{m.ci_high:.3f}",
                f"{m.verdict}: {m.reason}" if m.reason else m.verdict,
            )
            lines.append("| " + " | ".join(cells) + " |" if markdown else "  " + "  ".join(cells))
            if m.ab:
                lines.append(f"{'  - ' if markdown else '      '}A/B: {m.ab}")
            for change in m.explanations:
                lines.append(
                    f"{'  - ' if markdown else '      because '}{change.key}: "
                    f"{_value(change.a)} -> {_value(change.b)}"
                )
    for label, findings in (
        ("only in A", diff.findings_only_a),
        ("only in B", diff.findings_only_b),
    ):
        if findings:
            lines.append(f"\n## Findings {label}\n" if markdown else f"\nFindings {label}:")
            for f in findings:
                lines.append(
                    f"{'- ' if markdown else '  '}{f.severity.value.upper()} {f.rule_id} "
                    f"{f.subject}: {f.said()}"
                )
    rising = diff.rising_counters()
    if rising:
        heading = "Counters that rose between the two snapshots (errors since A)"
        lines.append(f"\n## {heading}\n" if markdown else f"\n{heading}:")
        for c in rising:
            lines.append(f"{'- ' if markdown else '  '}{c.key}: {_value(c.a)} -> {_value(c.b)}")
    changes = diff.differences(include_noisy)
    if changes:
        lines.append("\n## Readings\n" if markdown else "\nReadings (A -> B):")
        if markdown:
            lines.append("| group | reading | A | B | change |")
            lines.append("| --- | --- | --- | --- | --- |")
        group = None
        told = set()
        # by group (the node's first, then in natural order), then key; each group's
        # place worked out once (64 GPUs: 23,000 changes in 200 groups); groups in the
        # same natural order ('GPU 3', 'GPU 03') share a place, their keys in key order
        group_of = diff_keys.group
        orders = {
            g: (g != "node", tuple(natural_key(g))) for g in {group_of(c.key) for c in changes}
        }
        places = {order: place for place, order in enumerate(sorted(set(orders.values())))}
        for c in sorted(changes, key=lambda c: (places[orders[group_of(c.key)]], c.key)):
            in_one_line = folded(c, whole)
            if not in_one_line and info(c.key)[VERDICT]:
                continue  # said under Health, first
            if in_one_line:  # a lost GPU: one line, not one per reading
                index = info(c.key)[GPU]
                if index is not None and index not in told:
                    told.add(index)
                    kind, count = whole[index]
                    side = "A" if kind == "only_a" else "B"
                    if index in lost and index in held:
                        said = (
                            f"lost in {lost[index]}: its {count} readings that differ "
                            "and its GPU pairs in the topology are not listed"
                        )
                    else:
                        said = (
                            f"every reading only in {side} ({count}; its GPU pairs in the "
                            "topology too): lost or removed"
                        )
                    lines.append(
                        f"| {c.group} | every reading | | | {said} |"
                        if markdown
                        else f"  {c.group}: {said}"
                    )
                    group = None
                continue
            rel = c.relative_change
            delta = f"{rel:+.1%}" if rel is not None else c.kind.replace("_", " ")
            if markdown:
                cells = (c.group, c.key, _value(c.a), _value(c.b), delta)
                lines.append("| " + " | ".join(cells) + " |")
                continue
            if c.group != group:  # per-GPU (and per-device) differences under one heading
                group = c.group
                lines.append(f"  {group}:")
            lines.append(f"    {c.key}: {_value(c.a)} -> {_value(c.b)} ({delta})")
    hidden = len(diff.differences(True)) - len(diff.differences(False))
    if hidden and not include_noisy:
        lines.append(f"\n({hidden} differences in readings that always vary are hidden: --all)")
    if len(lines) == header:
        lines.append("no differences")
    if width is not None and not markdown:  # the body too, each line under its own indent
        body = "\n".join(lines[header:]).split("\n")
        lines[header:] = [
            part for line in body for part in wrap(line, width, len(line) - len(line.lstrip()) + 2)
        ]
    return "\n".join(lines) + "\n"


def report_json(diff: Diff, include_noisy: bool = False) -> dict[str, Any]:
    """The differences as plain data."""

    def reading(r: Reading | None) -> Any:
        return None if r is None else {"value": r.value, "unit": r.unit, "status": r.status.value}

    return {
        "exit_code": diff.exit_code(),
        "gpu_map": diff.gpu_map,
        "rising_counters": [c.key for c in diff.rising_counters()],
        "health": [c.key for c in diff.health_changes()],
        "lost_gpus": diff.lost_gpus(),
        "readings": [
            {
                "key": c.key,
                "kind": c.kind,
                "a": reading(c.a),
                "b": reading(c.b),
                "relative_change": c.relative_change,
            }
            for c in diff.differences(include_noisy)
        ],
        "findings_only_a": [
            {"rule_id": f.rule_id, "subject": f.subject, "severity": f.severity.value}
            for f in diff.findings_only_a
        ],
        "findings_only_b": [
            {"rule_id": f.rule_id, "subject": f.subject, "severity": f.severity.value}
            for f in diff.findings_only_b
        ],
        "metrics": [
            {
                "kernel": m.kernel,
                "device": m.device,
                "metric": m.metric,
                "unit": m.unit,
                "median_a": m.median_a,
                "median_b": m.median_b,
                "ratio": m.ratio,
                "ci95": [m.ci_low, m.ci_high],
                "verdict": m.verdict,
                "reason": m.reason,
                "explanations": [c.key for c in m.explanations],
                "ab": m.ab,
            }
            for m in diff.metrics
        ],
    }
