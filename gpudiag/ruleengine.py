"""The rules engine: rules and readings in, findings out.

The rules language and rule files are gpudiag/rulefile.py; the operators, each defined
once, gpudiag/rule_operators.py; the GPU-model profiles gpudiag/profiles.py; the subjects,
their keys and which source holds what, gpudiag/catalog.py. Here: each rule's instances in
a set of readings, the plan (which rule checks which key, cached per shape of readings),
and the findings, worst first.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from operator import attrgetter

from gpudiag import catalog, shipped
from gpudiag.catalog import natural_key
from gpudiag.model import (
    Finding,
    ProbeResult,
    ProbeStatus,
    Reading,
    ReadingStatus,
    Severity,
)
from gpudiag.profiles import Profile
from gpudiag.record import record
from gpudiag.rule_operators import (
    PROFILE_OPERATORS,
    QUICK_OPERATORS,
    READING_OPERATORS,
    all_pass,
    compare,
    quick_check,
)
from gpudiag.rulefile import MESSAGE_FIELD, SCOPES, Rule, action_for

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from typing import Any

# ------------------------------------------------------------------ evaluation


def plain_value(reading: Reading) -> str:
    """A reading's value for a message, without its unit: 700.0 -> '700', lists joined,
    an empty list 'none'."""

    def text(value: Any) -> str:
        return f"{value:g}" if isinstance(value, float) else str(value)

    value = reading.value
    if value == []:
        return "none"
    return ", ".join(map(text, value)) if isinstance(value, list) else text(value)


def _render(template: str, fields: dict[str, str]) -> str:
    return MESSAGE_FIELD.sub(lambda m: fields.get(m.group(1), m.group(0)), template)


def instances(
    rule: Rule, readings: dict[str, Reading], index: catalog.SubjectIndex | None = None
) -> list[tuple[tuple[str, ...], str]]:
    """Every assignment of the rule's placeholders (values in the order of its scope's
    names) that the readings hold, with the key it reads: every GPU for a gpu rule
    (whether or not it has this reading), else the instances whose reading exists."""
    names = SCOPES[rule.applies_to]
    if rule.operator == "all_equal":
        return [((), rule.reading)]
    if not names:
        return [((), rule.reading)] if not rule.if_present or rule.reading in readings else []
    index = index or catalog.SubjectIndex.of(readings)
    key_of = catalog.key_former(rule.reading, names)
    keys = [(values, key_of(*values)) for values in index.by_scope[rule.applies_to]]
    if rule.if_present or not catalog.SUBJECTS[rule.applies_to].every_instance:
        keys = [(values, key) for values, key in keys if key in readings]
    return keys


def _missing(key: str) -> Reading:
    return Reading.failed(key, ReadingStatus.MISSING, "no probe produced it")


CANNOT_CHECK = "cannot check:"  # how the message of a finding that could not check starts
UNCHECKED_TITLE = "could not check: "  # and its title


@record
class _Context:
    """What the rules are judged against: the readings, the profile, the sources."""

    readings: dict[str, Reading]
    profile: Profile | None
    sources: tuple[str, ...] = ()  # the snapshot's probe names; () judges without coverage

    def missing(self, key: str) -> Reading:
        """An absent reading as evidence: where a producer of it ran in this snapshot,
        saying so (a snapshot from an older gpudiag), never that no probe produced it."""
        if key in self.readings:
            return self.readings[key]
        ran = sorted(p for p in shipped.catalog().producers(key) if p in self.sources)
        if not ran:
            return _missing(key)
        reason = (
            f"not recorded by the {', '.join(ran)} probe, which ran "
            "(a snapshot saved by an older gpudiag)"
        )
        return Reading.failed(key, ReadingStatus.MISSING, reason)

    def cannot_hold(self, key: str) -> bool:
        """True when `key` is absent and none of the snapshot's sources could hold it."""
        return (
            bool(self.sources)
            and key not in self.readings
            and not shipped.can_hold(self.sources, key)
        )


def _finding(
    rule: Rule,
    subject: str,
    severity: Severity,
    message: str,
    evidence: Iterable[Reading],
    values: dict[str, str] | None = None,
) -> Finding:
    """A finding of `rule`; its fix names the instance (`nvidia-smi -pm 1 -i {gpu}`). One
    that could not check says so in its title too, wherever the title alone is shown (a
    rule's title states what it looks for, never observed here)."""
    fix = _render(rule.fix, values) if values else rule.fix
    unchecked = message.startswith(CANNOT_CHECK)
    return Finding(
        rule.id,
        severity,
        subject,
        f"{UNCHECKED_TITLE}{rule.title}" if unchecked else rule.title,
        message,
        tuple(evidence),
        rule.why,
        fix,
        action_for(severity, rule.action),
    )


def _unknown(
    rule: Rule,
    subject: str,
    reading: Reading,
    evidence: Iterable[Reading],
    values: dict[str, str] | None = None,
) -> Finding:
    severity = Severity.INFO if rule.severity is Severity.INFO else Severity.UNKNOWN
    message = f"{CANNOT_CHECK} {reading.key} is {reading.status.value} ({reading.reason})"
    return _finding(rule, subject, severity, message, evidence, values)


def _not_applicable(rule: Rule, values: dict[str, str], key: str, context: _Context) -> Finding:
    message = f"does not apply: {key} is not something {shipped.describe(context.sources)} holds"
    subject = catalog.subject_title(rule.applies_to, values)
    return _finding(rule, subject, Severity.NOT_APPLICABLE, message, [_missing(key)], values)


def _unsupported(rule: Rule, values: dict[str, str], reading: Reading) -> Finding:
    """The device (or host) answered that it has no such thing: the rule does not apply."""
    message = f"does not apply: {reading.key} is unsupported ({reading.reason})"
    subject = catalog.subject_title(rule.applies_to, values)
    return _finding(rule, subject, Severity.NOT_APPLICABLE, message, (reading,), values)


def _all_equal(
    rule: Rule,
    context: _Context,
    gpus: tuple[str, ...],
    skipped: set[str],
    unreached: tuple[Reading, ...] = (),
) -> Finding | None:
    """`skipped`: the GPUs left out (lost, or not reached); `unreached`: the health
    readings of those the source did not reach: where the others agree, whether these do
    too is not known."""
    if rule.applies_if and (finding := _does_not_apply(rule, {}, context)) is not None:
        return finding
    keys = [rule.reading.replace("{gpu}", gpu) for gpu in gpus if gpu not in skipped]
    if not keys:
        return None
    held = [k for k in keys if not context.cannot_hold(k)]  # a -q -d file shows some GPUs'
    if not held:
        return _not_applicable(rule, {}, keys[0], context)
    readings = [context.missing(k) for k in held]
    unsupported = ReadingStatus.UNSUPPORTED
    if all(r.status is unsupported for r in readings):  # no GPU has it (a GeForce's InfoROM)
        return _unsupported(rule, {}, readings[0])
    readings = [r for r in readings if r.status is not unsupported]  # compare those that have it
    failed = next((r for r in readings if not r.ok), None)
    if failed is not None:
        return _unknown(rule, "node", failed, readings)
    values = Counter(str(r.value) for r in readings)
    if len(values) <= 1:
        return _unknown(rule, "node", unreached[0], readings) if unreached else None
    listing = "; ".join(f"{v} on {n} GPU{'s' if n > 1 else ''}" for v, n in values.most_common())
    message = (
        _render(rule.message, {"value": listing})
        if rule.message
        else (f"{rule.reading} differs across GPUs: {listing}")
    )
    return _finding(rule, "node", rule.severity, message, readings)


def _does_not_apply(rule: Rule, values: dict[str, str], context: _Context) -> Finding | None:
    """A not-applicable finding when the rule's applies_if is known and not met."""
    for kind, name, equal in rule.applies_if:
        if kind == "profile":
            if context.profile is None or name not in context.profile.values:
                continue
            actual = context.profile.values[name]
            if actual != equal:
                message = (
                    f"does not apply: the {context.profile.title} profile has {name} = "
                    f"{str(actual).lower()}"
                )
                return _finding(
                    rule,
                    catalog.subject_title(rule.applies_to, values),
                    Severity.NOT_APPLICABLE,
                    message,
                    (),
                    values,
                )
            continue
        key = catalog.fill(name, values)
        reading = context.readings.get(key)
        if reading is not None and reading.ok and reading.value != equal:
            shown = str(reading.value).lower() if isinstance(reading.value, bool) else None
            message = f"does not apply: {key} is {shown or plain_value(reading)}"
            if reading.reason:
                message += f" ({reading.reason})"
            return _finding(
                rule,
                catalog.subject_title(rule.applies_to, values),
                Severity.NOT_APPLICABLE,
                message,
                (reading,),
                values,
            )
    return None


def _evaluate_instance(
    rule: Rule, values: dict[str, str], context: _Context, key: str
) -> Finding | None:
    if rule.applies_if and (finding := _does_not_apply(rule, values, context)) is not None:
        return finding
    reading = context.readings.get(key)
    if reading is None and context.cannot_hold(key):
        return _not_applicable(rule, values, key, context)
    status = reading.status if reading is not None else ReadingStatus.MISSING
    if status is ReadingStatus.UNSUPPORTED and rule.operator != "present":
        assert reading is not None  # the device answered it has no such thing: does not apply
        return _unsupported(rule, values, reading)
    if status is ReadingStatus.NOT_REACHED:  # not known, not failed: even `present` cannot tell
        assert reading is not None
        subject = catalog.subject_title(rule.applies_to, values)
        return _unknown(rule, subject, reading, (reading,), values)
    operator = rule.operator
    if status is ReadingStatus.OK and operator == "present":
        return None
    evidence = [reading or context.missing(key)]
    expected: Any = rule.operand
    threshold: Any = expected  # what `expected` is before the rule's factor
    if status is ReadingStatus.OK:
        if operator in READING_OPERATORS:
            other_key = catalog.fill(rule.operand, values)
            if context.cannot_hold(other_key):
                return _not_applicable(rule, values, other_key, context)
            other = context.missing(other_key)
            evidence.append(other)
            if other.status is ReadingStatus.UNSUPPORTED:
                return _unsupported(rule, values, other)  # nothing to compare with here
            if not other.ok:
                return _unknown(
                    rule, catalog.subject_title(rule.applies_to, values), other, evidence, values
                )
            expected = other.value
        elif operator in PROFILE_OPERATORS:
            if context.profile is None or rule.operand not in context.profile.values:
                return None  # no profile, or the model has no fixed value: see PROF001
            expected = context.profile.values[rule.operand]
        threshold = expected
        try:
            if rule.factor != 1.0 and isinstance(expected, (int, float)):
                expected = expected * rule.factor
            if compare(evidence[0].value, operator, expected):
                return None  # the common case: checked, and fine
        except (TypeError, OverflowError) as exc:
            # OverflowError: an integer past a float64, which no loader lets through
            why = str(exc) if isinstance(exc, TypeError) else "a number too large to compare"
            return _finding(
                rule,
                catalog.subject_title(rule.applies_to, values),
                Severity.UNKNOWN,
                f"{CANNOT_CHECK} {why}",
                evidence,
                values,
            )
    # from here on something will be reported: build its words
    reading = evidence[0]
    subject = catalog.subject_title(rule.applies_to, values)
    if not reading.ok and not (operator == "present" and key in context.readings):
        return _unknown(rule, subject, reading, evidence, values)
    fields = {
        **values,
        "key": key,
        "unit": reading.unit,
        "reason": reading.reason,
        "value": plain_value(reading) if reading.ok else reading.status.value,
        "expected": f"{expected:g}" if isinstance(expected, float) else str(expected),
        "threshold": f"{threshold:g}" if isinstance(threshold, float) else str(threshold),
        "source": context.profile.source(rule.operand)
        if operator in PROFILE_OPERATORS and context.profile is not None
        else "",
        "s": "" if reading.ok and reading.value == 1 else "s",  # '1 row', '2 rows'
    }
    if operator == "present":  # read, and the read failed
        message = _render(rule.message, fields) if rule.message else reading.reason
    elif rule.message:
        message = _render(rule.message, fields)
    else:
        message = (
            f"{key} is {reading.display()}, expected {operator.replace('_', ' ')} "
            f"{fields['expected']}"
        )
    return _finding(rule, subject, rule.severity, message, evidence, values)


def probe_findings(probes: Iterable[ProbeResult]) -> list[Finding]:
    """PROBE001: a probe that failed or timed out leaves its readings unknown."""
    return [
        Finding(
            rule_id="PROBE001",
            severity=Severity.UNKNOWN,
            subject=f"probe {probe.name}",
            title="A probe did not finish",
            message=f"probe {probe.name} {probe.status.value}: {probe.error}",
            why="Its readings are missing, so the rules that need them cannot decide.",
            fix="Run `gpudiag --export -` again; if it persists, report the error.",
        )
        for probe in probes
        if probe.status in (ProbeStatus.ERROR, ProbeStatus.TIMEOUT)
    ]


def profile_finding(
    profile: Profile | None, device_ids: list[str], rules: Sequence[Rule]
) -> list[Finding]:
    """PROF001: the GPUs are of a model gpudiag has no profile for."""
    if profile is not None or not device_ids:
        return []
    skipped = sum(1 for r in rules if r.operator in PROFILE_OPERATORS)
    return [
        Finding(
            rule_id="PROF001",
            severity=Severity.INFO,
            subject="node",
            title="No profile for this GPU model",
            message=f"no profile matches PCI device id(s) {', '.join(device_ids)}: {skipped} "
            "model-specific checks skipped, the others ran",
            why="Expected link counts, clocks, power and bandwidth depend on the GPU model.",
            fix="Pass --profile NAME (gpudiag rules profiles lists them), or add a profile.",
        )
    ]


def evaluate(
    rules: Sequence[Rule],
    readings: dict[str, Reading],
    probes: Sequence[ProbeResult] = (),
    profile: Profile | None = None,
    device_ids: Sequence[str] = (),
    *,
    quick: bool = True,
) -> list[Finding]:
    """All findings, worst first (then by rule id and subject). `quick=False` sends every
    instance through the full evaluation: the reference the plan's quick tests (which
    only ever skip an instance the full evaluation finds nothing in) are tested against."""
    context = _Context(readings, profile, tuple(dict.fromkeys(p.name for p in probes)))
    if any(rule.gpu_models for rule in rules):
        seen = set(device_ids)
        rules = [r for r in rules if not r.gpu_models or seen.intersection(r.gpu_models)]
    findings = probe_findings(probes) + profile_finding(profile, list(device_ids), rules)
    plan = _plan(rules, readings)
    lost = {gpu for gpu in plan.gpus if catalog.is_lost(readings, gpu)}
    unreached = {
        gpu: health
        for gpu in plan.gpus
        if (health := catalog.not_reached(readings, gpu)) is not None
    }
    # a lost GPU answers nothing, and one the source did not reach tells nothing: GPU001
    # says so, once (critical where lost, unknown where not reached)
    skipped = lost | unreached.keys()
    for rule in plan.all_equal:
        finding = _all_equal(rule, context, plan.gpus, skipped, tuple(unreached.values()))
        if finding is not None:
            findings.append(finding)
    checks = plan.checks
    if quick:
        positions = _unsure(plan, readings, profile, skipped)
    else:
        positions = [i for i, (*_, gpu) in enumerate(plan.checks) if gpu not in skipped]
    for position in positions:
        rule, values, key, _ = checks[position]
        assignment = dict(zip(SCOPES[rule.applies_to], values, strict=True))
        finding = _evaluate_instance(rule, assignment, context, key)
        if finding is not None:
            findings.append(finding)
    findings.extend(_nothing_checked(plan, skipped, findings, context.sources))
    findings.sort(key=lambda f: (-_RANKS[f.severity], f.rule_id, _subject_order(f.subject)))
    return findings


_RANKS = {severity: severity.rank for severity in Severity}


def _nothing_checked(
    plan: _Plan, skipped: set[str], findings: list[Finding], sources: tuple[str, ...]
) -> list[Finding]:
    """IMPORT001: an import in which no rule found anything to check (every instance of
    every rule did not apply, or no rule had one) is no verdict on the node, and says so
    (unknown) rather than passing silently. Only imports: a live probe's sources are
    known to hold what they declare."""
    fed = [s for s in sources if s != shipped.DERIVED]  # derived holds what they give
    if not fed or not all(s.startswith("import-") for s in fed):
        return []
    ruled = [f for f in findings if f.rule_id not in ("PROBE001", "PROF001")]
    if any(f.severity is not Severity.NOT_APPLICABLE for f in ruled):
        return []
    instances = sum(1 for *_, gpu in plan.checks if gpu is None or gpu not in skipped)
    if plan.gpus:
        instances += len(plan.all_equal)
    if instances > len(ruled):
        return []  # some instance was checked (and was fine)
    return [
        Finding(
            rule_id="IMPORT001",
            severity=Severity.UNKNOWN,
            subject="node",
            title="Nothing in the import could be checked",
            message=f"no rule found evidence to check in {shipped.describe(sources)}: "
            "no verdict on the node",
            why="Every rule's evidence is of a kind these files do not hold; a pass would "
            "say nothing.",
            fix="Import the node's nvidia-smi -q -x (or -q) output with it.",
        )
    ]


@functools.lru_cache(maxsize=4096)
def _subject_order(subject: str) -> tuple[object, ...]:
    """How findings of one rule are ordered by subject: GPU 2 before GPU 10."""
    return tuple(natural_key(subject))


def _unsure(
    plan: _Plan, readings: dict[str, Reading], profile: Profile | None, skipped: set[str]
) -> list[int]:
    """The positions in plan.checks that need the full evaluation, in order: those whose
    quick test does not pass (a lost or unreached GPU's are left out: GPU001 says so,
    once)."""
    get = readings.get
    ok = ReadingStatus.OK
    unsure: list[int] = list(plan.slow)
    # the plan's keys are those of the readings it was made for (it is cached by them):
    # each is there, and its value is None exactly when it was not taken
    values = _values_of(readings)
    fields = profile.values if profile is not None else None
    for rule, check, every, keys, positions in plan.quick:
        if check is None:  # a *_profile rule: its test is made for this profile
            check, every = _profile_check(rule, fields)
            if check is None:
                unsure.extend(positions)
                continue
        if every is not None:
            read = values(keys)
            if every(read):
                continue  # the common case: every instance read, and fine
            unsure.extend(
                p for p, v in zip(positions, read, strict=True) if v is None or not check(v)
            )
            continue
        for position, reading in zip(positions, map(get, keys), strict=True):
            if reading is None or reading.status is not ok or not check(reading.value):
                unsure.append(position)
    for test, key, position in plan.guarded:
        reading = get(key)
        if reading is None or reading.status is not ok or not test(reading.value, get, fields):
            unsure.append(position)
    if skipped:
        checks = plan.checks
        unsure = [p for p in unsure if checks[p][3] is None or checks[p][3] not in skipped]
    unsure.sort()
    return unsure


def rules_with_instances(rules: Sequence[Rule], readings: dict[str, Reading]) -> set[str]:
    """The ids of the enabled rules that have something to check in these readings (a
    GPU, a link, a device...); the others do not apply to them."""
    plan = _plan(rules, readings)
    ids = {rule.id for rule, *_ in plan.checks}
    if plan.gpus:
        ids.update(rule.id for rule in plan.all_equal)
    return ids


def fast_check(rule: Rule) -> Callable[[Any], bool] | None:
    """A quick test that a value passes a constant expectation: True means it passes;
    False sends it to the full evaluation, which also words a finding or an error.
    None where the expectation needs more than the value (other readings, a profile)."""
    if rule.factor != 1.0 or rule.operator not in QUICK_OPERATORS:
        return None
    return quick_check(rule.operator, rule.operand)


_NUMBER = (int, float)
if TYPE_CHECKING:  # types of the annotations below
    _Lookup = Callable[[str], Reading | None]
    # a quick test of a read value that may look at other readings and the profile's fields
    _Guarded = Callable[[Any, _Lookup, dict[str, Any] | None], bool]
    _Check = Callable[[Any], bool]
    _Every = Callable[[list[Any]], bool]


def _values_of(readings: dict[str, Reading]) -> Callable[[tuple[str, ...]], list[Any]]:
    """The values of these keys, in C loops (every key must be there)."""
    lookup = readings.__getitem__
    return lambda keys: list(map(_VALUE, map(lookup, keys)))


_VALUE = attrgetter("value")


def _profile_check(
    rule: Rule, fields: dict[str, Any] | None
) -> tuple[_Check | None, _Every | None]:
    """The quick tests of a *_profile rule's values against this profile, one at a time
    and all at once: as `fast_check` (True only where the full evaluation finds the
    value fine); (None, None) where every instance needs the full evaluation (a field
    that is not a number, for min or max)."""
    if fields is None or rule.operand not in fields:
        # no profile, or it leaves the field out: nothing to check
        return quick_check("present", None), all_pass("present", None)
    expected = fields[rule.operand]
    if rule.factor != 1.0 and isinstance(expected, _NUMBER):
        try:
            expected = expected * rule.factor
        except OverflowError:  # the full evaluation says it cannot check
            return None, None
    base = rule.operator.removesuffix("_profile")
    if base != "equal" and type(expected) not in _NUMBER:
        return None, None
    return quick_check(base, expected), all_pass(base, expected)


def _compared(rule: Rule, values: tuple[str, ...]) -> _Guarded | None:
    """The quick test of one instance's value, whatever its operator compares with (a
    constant, another reading, the profile): True only where the full evaluation
    (`_evaluate_instance`, the applies_if aside) finds the value fine; False (anything
    doubtful) sends the instance there. None where there is no quick test."""
    if rule.operator in PROFILE_OPERATORS:
        return lambda value, get, fields: (
            (check := _profile_check(rule, fields)[0]) is not None and check(value)
        )
    if rule.operator not in READING_OPERATORS:
        constant = fast_check(rule)
        if constant is None:
            return None
        return lambda value, get, fields: constant(value)
    other_key = catalog.key_former(rule.operand, SCOPES[rule.applies_to])(*values)
    base = rule.operator.removesuffix("_reading")
    factor = rule.factor
    ok = ReadingStatus.OK

    def passes(value: Any, get: _Lookup, fields: dict[str, Any] | None) -> bool:
        other = get(other_key)
        if other is None or other.status is not ok:
            return False
        expected = other.value
        if factor != 1.0 and isinstance(expected, _NUMBER):
            try:
                expected = expected * factor
            except OverflowError:  # the full evaluation says it cannot check
                return False
        if base != "equal" and type(expected) not in _NUMBER:
            return False
        return quick_check(base, expected)(value)

    return passes


def _applies_test(rule: Rule, values: tuple[str, ...]) -> Callable[..., bool]:
    """True where every applies_if condition holds or is not known (the rule applies)."""
    names = SCOPES[rule.applies_to]
    conditions = [
        (kind, catalog.key_former(name, names)(*values) if kind == "reading" else name, equal)
        for kind, name, equal in rule.applies_if
    ]
    ok = ReadingStatus.OK

    def applies(get: _Lookup, fields: dict[str, Any] | None) -> bool:
        for kind, name, equal in conditions:
            if kind == "profile":
                if fields is not None and name in fields and fields[name] != equal:
                    return False
                continue
            reading = get(name)
            if reading is not None and reading.status is ok and reading.value != equal:
                return False
        return True

    return applies


def _guarded_test(rule: Rule, values: tuple[str, ...]) -> _Guarded | None:
    """The quick test of one instance of a rule: its applies_if conditions, then its
    comparison; None where there is none."""
    compared = _compared(rule, values)
    if compared is None or not rule.applies_if:
        return compared
    applies = _applies_test(rule, values)
    return lambda value, get, fields: applies(get, fields) and compared(value, get, fields)


@record
class _Plan:
    """Which rule checks which key, for one set of rules and one shape of readings."""

    gpus: tuple[str, ...]
    # (rule, its placeholders' values, the key it reads, the GPU whose loss skips it or
    # None: a lost GPU answers nothing, GPU001 says so once)
    checks: tuple[tuple[Rule, tuple[str, ...], str, str | None], ...]
    all_equal: tuple[Rule, ...]
    # The quick tests, by the positions of their checks in `checks`. `quick`: a rule's
    # tests of the value alone, one at a time and all at once, over the keys there are,
    # (rule, test or None for a *_profile rule's, made per profile, all-at-once test or
    # None, keys, positions); `guarded`: one instance's test that also looks at other
    # readings or the profile, (test, key, position); `slow`: the positions with no
    # quick test, or whose key is not there.
    quick: tuple[
        tuple[Rule, _Check | None, _Every | None, tuple[str, ...], tuple[int, ...]], ...
    ] = ()
    guarded: tuple[tuple[_Guarded, str, int], ...] = ()
    slow: tuple[int, ...] = ()


_PLANS: dict[tuple[Any, ...], _Plan] = {}


def _plan(rules: Sequence[Rule], readings: dict[str, Reading]) -> _Plan:
    """The checks to make. It depends only on the rules and on which keys exist, so nodes
    of one shape (a fleet of one SKU, or one node snapshotted again) share it."""
    cache_key = (tuple(map(id, rules)), tuple(readings))
    plan = _PLANS.get(cache_key)
    if plan is not None:
        return plan
    index = catalog.SubjectIndex.of(readings)
    checks = []
    all_equal = []
    quick = []
    guarded = []
    slow = []
    for rule in rules:
        if rule.status == "deprecated" or rule.disabled:
            continue
        if rule.operator == "all_equal":
            all_equal.append(rule)
            continue
        check = None if rule.applies_if else fast_check(rule)  # applies_if: full path
        on_gpu = SCOPES[rule.applies_to][:1] == ("gpu",)
        health = rule.reading.endswith(".health")  # a lost GPU's health is still judged
        found = instances(rule, readings, index)
        first = len(checks)
        checks.extend(
            (rule, values, key, values[0] if on_gpu and not health else None)
            for values, key in found
        )
        positions = tuple(range(first, len(checks)))
        if check is not None or (rule.operator in PROFILE_OPERATORS and not rule.applies_if):
            there = [
                (p, key) for p, (_, key) in zip(positions, found, strict=True) if key in readings
            ]
            slow.extend(
                p for p, (_, key) in zip(positions, found, strict=True) if key not in readings
            )
            if there:
                every = all_pass(rule.operator, rule.operand) if check is not None else None
                keys = tuple(key for _, key in there)
                quick.append((rule, check, every, keys, tuple(p for p, _ in there)))
        else:
            for position, (values, key) in zip(positions, found, strict=True):
                if (test := _guarded_test(rule, values)) is not None:
                    guarded.append((test, key, position))
                else:
                    slow.append(position)
    plan = _Plan(
        tuple(g for (g,) in index.by_scope["gpu"]),
        tuple(checks),
        tuple(all_equal),
        tuple(quick),
        tuple(guarded),
        tuple(slow),
    )
    if len(_PLANS) >= 16:
        _PLANS.clear()
    _PLANS[cache_key] = plan
    return plan
