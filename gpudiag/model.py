"""The data model every part of gpudiag shares: readings, probe results, findings,
kernel results and the snapshot that holds them all.

Everything here is plain data (frozen dataclasses of str, int, float, bool and lists
of those), so that a snapshot written to TOML or JSON loads back to equal objects.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from enum import Enum

from gpudiag.inputs import (
    HOST_NAME_MAX,
    host_name,
    number_too_large,
    one_line,
    too_large_text,
)
from gpudiag.record import field, record

SCHEMA_VERSION = 2

Scalar = bool | int | float | str
Value = Scalar | list[Scalar]


class ReadingStatus(str, Enum):
    """Whether a reading could be taken, and if not, why. `not-reached`: the source
    stops before it (a paste cut short, a file of some of the GPUs): not known, neither
    failed nor absent; a rule on it cannot check, never fires."""

    OK = "ok"
    UNSUPPORTED = "unsupported"
    MISSING = "missing"
    NEEDS_ROOT = "needs-root"
    ERROR = "error"
    NOT_REACHED = "not-reached"


class ProbeStatus(str, Enum):
    """How a probe's run ended."""

    OK = "ok"
    ERROR = "error"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"


class Severity(str, Enum):
    """A finding's severity; `unknown` means evidence that should be there could not be
    read; `not-applicable` (schema version 2) means the rule's evidence is of a kind the
    source can never hold (host rules on an nvidia-smi import): shown apart, never counted
    as unknown, never setting the exit code."""

    CRITICAL = "critical"
    WARNING = "warning"
    UNKNOWN = "unknown"
    INFO = "info"
    NOT_APPLICABLE = "not-applicable"

    @property
    def rank(self) -> int:
        """Higher is worse: critical 3, warning 2, unknown 1, info 0, not-applicable -1."""
        return _SEVERITY_RANK[self.value]


_SEVERITY_RANK = {"critical": 3, "warning": 2, "unknown": 1, "info": 0, "not-applicable": -1}


class Action(str, Enum):
    """What to do about a finding, weakest first (a closed set, as NVIDIA's health
    validation recommends one): nothing, keep an eye on it, reset the GPU, reboot the
    node, take the node out of service (drain), send the part back (service, RMA)."""

    NONE = "none"
    MONITOR = "monitor"
    RESET = "reset"
    REBOOT = "reboot"
    DRAIN = "drain"
    SERVICE = "service"

    @property
    def rank(self) -> int:
        """Higher is stronger: none 0 ... service 5."""
        return _ACTION_ORDER.index(self.value)


_ACTION_ORDER = ("none", "monitor", "reset", "reboot", "drain", "service")


def check_value(value: object) -> Value:
    """Return `value` if it is a storable reading value, else raise ValueError.

    Storable: bool, int or finite float (within `inputs.MAX_NUMBER`, the bound of every
    loader), str, or a flat list of those. NaN and infinity are refused: a
    value that could not be read is a status, not a number.
    """
    if isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        if number_too_large(value):
            raise ValueError(too_large_text(value))
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"non-finite number {value!r}")
        if number_too_large(value):
            raise ValueError(too_large_text(value))
        return value
    if isinstance(value, list):
        for item in value:
            if isinstance(item, list) or item is None:
                raise ValueError("lists of readings hold scalars only")
            check_value(item)
        return value
    raise ValueError(f"unsupported value type {type(value).__name__}")


_new, _set = object.__new__, object.__setattr__


@record
class Reading:
    """One fact about the node, flat-keyed, e.g. `gpu.3.pcie.link_width`.

    `value` is None exactly when `status` is not ok; `reason` then says why.
    `source` names where it came from: `nvml:nvmlDeviceGetCurrPcieLinkWidth`,
    `sysfs:bus/pci/devices/0000:1b:00.0/current_link_width`, `file:/etc/os-release`.
    """

    key: str
    value: Value | None
    unit: str = ""
    source: str = ""
    status: ReadingStatus = ReadingStatus.OK
    reason: str = ""

    def __init__(
        self,
        key: str,
        value: Value | None,
        unit: str = "",
        source: str = "",
        status: ReadingStatus = ReadingStatus.OK,
        reason: str = "",
    ) -> None:  # written out (record: the generic one binds in a loop), thousands made
        _set(self, "__dict__", {"key": key, "value": value, "unit": unit, "source": source,
                                "status": status, "reason": reason})  # fmt: skip
        self.__post_init__()

    def __post_init__(self) -> None:
        if not self.key:
            raise ValueError("a reading needs a key")
        _one_line_fields(self, ("key", "unit", "source"))
        value = self.value
        if type(value) is str:
            if not value.isprintable():
                _set(self, "value", one_line(value))
        elif type(value) is list and not all(type(v) is not str or v.isprintable() for v in value):
            _set(self, "value", [one_line(v) if type(v) is str else v for v in value])
        if self.status is ReadingStatus.OK:
            if self.value is None:
                raise ValueError(f"reading {self.key}: status ok needs a value")
            check_value(self.value)
        elif self.value is not None:
            raise ValueError(f"reading {self.key}: status {self.status.value} carries no value")

    @classmethod
    def checked(
        cls,
        key: str,
        value: Value | None,
        unit: str,
        source: str,
        status: ReadingStatus,
        reason: str,
    ) -> Reading:
        """A reading made without __init__'s checks, for a loader that has made them
        itself (every field of its exact type, a non-empty key, a value exactly when
        the status is ok, a storable value; snapshot._plain_reading makes its __dict__
        the same way, from the table it reads): the same reading as
        Reading(...) gives, about four times faster, which counts for a snapshot's
        thousands of readings (tests/test_snapshot.py holds them equal)."""
        reading = _new(cls)
        _set(
            reading,
            "__dict__",
            {
                "key": key,
                "value": value,
                "unit": unit,
                "source": source,
                "status": status,
                "reason": reason,
            },
        )
        return reading

    @property
    def ok(self) -> bool:
        """True when the reading was taken."""
        return self.status is ReadingStatus.OK

    @classmethod
    def failed(
        cls, key: str, status: ReadingStatus, reason: str, source: str = "", unit: str = ""
    ) -> Reading:
        """A reading that could not be taken, with the reason why."""
        return cls(key=key, value=None, unit=unit, source=source, status=status, reason=reason)

    def display(self) -> str:
        """The value with its unit, or the status and reason when it was not read."""
        if not self.ok:
            return f"[{self.status.value}] {self.reason}".rstrip()
        value = ", ".join(map(str, self.value)) if isinstance(self.value, list) else self.value
        return f"{value} {self.unit}".rstrip() if self.unit else str(value)


def _one_line_fields(item: object, names: tuple[str, ...]) -> None:
    """Each named text field of a frozen dataclass made one line (inputs.one_line)."""
    for name in names:
        text = getattr(item, name)
        if not text.isprintable():
            _set(item, name, one_line(text))


@record
class ProbeResult:
    """What one probe returned, and how its run ended."""

    name: str
    status: ProbeStatus
    duration_s: float
    readings: tuple[Reading, ...] = ()
    error: str = ""
    title: str = ""

    def __post_init__(self) -> None:
        _one_line_fields(self, ("name", "title"))


@record
class Finding:
    """A rule's verdict on one subject (the node, a GPU, a link).

    `evidence` holds the readings the verdict rests on, as they were when the rule ran;
    a reading no probe produced appears with status missing. `action` is what the rule
    recommends doing about it (none for info and unknown findings).
    """

    rule_id: str
    severity: Severity
    subject: str
    title: str
    message: str
    evidence: tuple[Reading, ...] = ()
    why: str = ""
    fix: str = ""
    action: Action = Action.NONE

    def __init__(
        self,
        rule_id: str,
        severity: Severity,
        subject: str,
        title: str,
        message: str,
        evidence: tuple[Reading, ...] = (),
        why: str = "",
        fix: str = "",
        action: Action = Action.NONE,
    ) -> None:  # written out: hundreds made per judgment
        _set(self, "__dict__", {"rule_id": rule_id, "severity": severity, "subject": subject,
                                "title": title, "message": message, "evidence": evidence,
                                "why": why, "fix": fix, "action": action})  # fmt: skip
        _one_line_fields(self, ("rule_id", "subject", "title"))

    def said(self) -> str:
        """The message as shown after its subject ('GPU 3: PCIe link x8 of x16'): a
        message that opens with its subject (or a PCIe device's address) does not say it
        twice ('PCIe 0000:5d:00.0: 0000:5d:00.0 link x8 of x16' before)."""
        for said in (self.subject, self.subject.removeprefix("PCIe ")):
            for joint in (": ", " "):
                if said and self.message.startswith(said + joint):
                    return self.message[len(said) + len(joint) :]
        return self.message


@record
class Statistics:
    """Summary of a kernel's repeated trials."""

    count: int
    median: float
    minimum: float
    maximum: float
    mean: float
    cv: float
    ci95_low: float
    ci95_high: float


@record
class KernelResult:
    """Repeated measurements of one metric of one kernel on one device."""

    kernel: str
    device: str
    metric: str
    unit: str
    status: ProbeStatus
    samples: tuple[float, ...] = ()
    stats: Statistics | None = None
    params: tuple[tuple[str, Scalar], ...] = ()
    error: str = ""

    def __post_init__(self) -> None:
        _one_line_fields(self, ("kernel", "device", "metric", "unit"))


@record
class Snapshot:
    """Everything gpudiag knows about a node at one moment."""

    host: str
    created: str
    gpudiag_version: str
    command_line: tuple[str, ...] = ()
    probes: tuple[ProbeResult, ...] = ()
    kernels: tuple[KernelResult, ...] = ()
    findings: tuple[Finding, ...] = ()
    schema_version: int = SCHEMA_VERSION
    readings_by_key: dict[str, Reading] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        _one_line_fields(self, ("gpudiag_version",))
        if len(self.host) > HOST_NAME_MAX or not self.host.isprintable():
            _set(self, "host", host_name(self.host))
        index = self.readings_by_key
        for probe in self.probes:
            for reading in probe.readings:
                index[reading.key] = reading

    def with_findings(self, findings: Iterable[Finding]) -> Snapshot:
        """This snapshot with other findings: what dataclasses.replace(findings=...)
        gives, its index of readings shared instead of built again from every reading
        (the probes are the same; nothing changes a snapshot's index once built). Judging
        a snapshot ends here, once per judgment."""
        snapshot = _new(Snapshot)
        _set(snapshot, "__dict__", {**self.__dict__, "findings": tuple(findings)})
        return snapshot

    def with_probes(
        self, probes: tuple[ProbeResult, ...], readings_by_key: dict[str, Reading]
    ) -> Snapshot:
        """This snapshot with other results, given with their index of readings (what
        __post_init__ would build from them, in their order: the caller has it at hand).
        What dataclasses.replace(probes=...) gives, without a pass over every reading;
        re-deriving a snapshot ends here, once per judgment."""
        snapshot = _new(Snapshot)
        _set(
            snapshot,
            "__dict__",
            {**self.__dict__, "probes": probes, "readings_by_key": readings_by_key},
        )
        return snapshot

    def reading(self, key: str) -> Reading | None:
        """The reading with this key, or None when no probe produced it."""
        return self.readings_by_key.get(key)

    def worst_severity(self) -> Severity | None:
        """The worst severity among the findings that apply, or None when there are none."""
        applicable = [
            f.severity for f in self.findings if f.severity is not Severity.NOT_APPLICABLE
        ]
        if not applicable:
            return None
        return max(applicable, key=lambda s: s.rank)
