"""The declared catalog of readings: what every key means, who makes it, and how to read it.

Every reading travels as a flat key (`gpu.3.nvlink.5.state`). This module owns the grammar
of those keys and the declarations that give each one a meaning:

- Subjects: what readings are about (the node, a GPU, an NVLink, a pair of GPUs, a PCIe
  device, a NUMA node, ...), each with its key stem (`gpu.{gpu}.nvlink.{link}`), how a
  finding names one (`GPU 3 NVLink 5`) and how `rules explain` says "every one of them".
  Rules' `applies_to` scopes are these subjects.
- Declarations: each producer (a probe, the nvidia-smi importer, the kernel readings, the
  derived readings) declares the readings it makes where it makes them, as node_exporter's
  collectors declare their metrics: the key template, unit, screen group, whether the value
  changes between runs (configuration, volatile, or a counter that only rises since boot)
  and whether it identifies the machine (redaction's placeholder kind). The catalog
  collects them from the registries (`catalog()`), and the rules engine, `rules lint` and
  `explain`, the CLI, the views, the diff, the fleet and the redaction read it instead of
  tables of their own. A producer emits through its declarations, as node_exporter's
  collectors emit through their Descs: `Declared.key(**fields)` fills the template and
  refuses a missing or unknown field; `reading` and `failed` make the reading under that
  key in the declared unit (`Also.key` for templates declared in full elsewhere).
- Key helpers: filling a template, finding a key's declaration, the instances of each
  subject in a set of readings, and the one "is this GPU lost" check.

A key template's placeholders are subject names' placeholders (`{gpu}`, `{link}`, `{peer}`,
`{device}`, `{node}`, ...) with the forms in PLACEHOLDER_FORMS; any other placeholder stands
for one key segment (no dot), and `{metric}` for one or more segments.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping
from enum import Enum

from gpudiag.model import Reading, ReadingStatus
from gpudiag.record import field, record, replace

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from typing import Any

    from gpudiag.model import KernelResult, Value

PCI_ADDRESS = r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]"
# An instance index (a GPU, NVLink, NUMA node, port, NVMe controller): ASCII digits, at
# most MAX_INDEX_DIGITS of them, wherever a key is taken apart; a snapshot with a longer
# one is refused when loaded (check_key), never turned into a 5,000-digit int later
MAX_INDEX_DIGITS = 6
INDEX = f"[0-9]{{1,{MAX_INDEX_DIGITS}}}"
# placeholder -> the form of its values in a key (others: one segment, no dot)
PLACEHOLDER_FORMS: dict[str, str] = {
    "gpu": INDEX,
    "link": INDEX,
    "peer": INDEX,
    "node": INDEX,
    "port": INDEX,
    "device": PCI_ADDRESS,
    "nic": r"[^\n]+",  # a PCI address (dots and all) or a name from topo -m (mlx5_0)
    "metric": r"[^.\n]+(?:\.[^.\n]+)*?",
    "ctrl": INDEX,  # N of the kernel's nvmeN
}
_SEGMENT = r"[^.\n]+"
# a sample value per placeholder: what `rules lint` fills a rule's key with to look it up
_SAMPLES = {"device": "0000:00:00.0", "nic": "0000:00:00.0", "metric": "sample.metric"}
PLACEHOLDER_PATTERN = re.compile(r"\{(\w+)\}")


# ------------------------------------------------------------------ subjects


@record
class Subject:
    """What readings can be about; a rule's `applies_to` names one."""

    name: str
    stem: str  # the key stem holding an instance: "gpu.{gpu}.nvlink.{link}"
    title: str  # how a finding names one instance: "GPU {gpu} NVLink {link}"
    words: str  # "every NVLink of every GPU", for `rules explain`
    every_instance: bool = False  # judged on every instance, even one without the reading

    @functools.cached_property
    def placeholders(self) -> tuple[str, ...]:
        """The placeholders of the stem, in order: ('gpu', 'link')."""
        return tuple(PLACEHOLDER_PATTERN.findall(self.stem))

    @functools.cached_property
    def head(self) -> str:
        """The stem's first key segment ('gpu', 'topo', 'pcie'); '' for the node."""
        return self.stem.split(".", 1)[0] if self.stem else ""

    @functools.cached_property
    def instance_pattern(self) -> re.Pattern[str]:
        """Matches the stem at the start of a line of keys; its groups are the values."""
        return re.compile("^" + template_regex(self.stem, capture=True) + r"(?:\.|$)", re.M)


SUBJECTS: dict[str, Subject] = {
    s.name: s
    for s in (
        Subject("node", "", "node", "the node"),
        Subject("gpu", "gpu.{gpu}", "GPU {gpu}", "every GPU", every_instance=True),
        Subject(
            "nvlink",
            "gpu.{gpu}.nvlink.{link}",
            "GPU {gpu} NVLink {link}",
            "every NVLink of every GPU",
        ),
        Subject(
            "gpu_pair", "topo.gpu.{gpu}.{peer}", "GPU {gpu} - GPU {peer}", "every pair of GPUs"
        ),
        Subject("pcie_device", "pcie.{device}", "PCIe {device}", "every reported PCIe device"),
        Subject("numa_node", "numa.{node}", "NUMA node {node}", "every NUMA node"),
        Subject("ib_port", "ib.{hca}.{port}", "IB {hca} port {port}", "every InfiniBand/RoCE port"),
        Subject("nvme", "nvme.{ctrl}", "nvme{ctrl}", "every NVMe controller"),
    )
}


def scopes() -> dict[str, tuple[str, ...]]:
    """Each subject's name -> its placeholders (what a rule's key may use)."""
    return {name: s.placeholders for name, s in SUBJECTS.items()}


def subject_title(scope: str, values: Mapping[str, str]) -> str:
    """How a finding names what it is about: 'GPU 3 NVLink 5'."""
    return fill(SUBJECTS[scope].title, values)


@functools.cache
def _subjects_by_head() -> dict[str, tuple[tuple[str, re.Pattern[str], tuple[str, ...]], ...]]:
    """(name, instance pattern, placeholders) of the subjects with a stem, by the stem's
    first segment, in SUBJECTS' order: a key can only start with a stem whose first
    segment is the key's. A stem whose first segment is not literal text would be listed
    under every head (and under '{')."""
    by_head: dict[str, list[Subject]] = {}
    for subject in SUBJECTS.values():
        if subject.stem:
            by_head.setdefault("{" if "{" in subject.head else subject.head, []).append(subject)
    anywhere = by_head.pop("{", [])
    return {
        head: tuple(
            (s.name, s.instance_pattern, s.placeholders)
            for s in SUBJECTS.values()
            if s in found or s in anywhere
        )
        for head, found in [*by_head.items(), ("{", [])]
    }


def _subject_match(key: str) -> tuple[str, tuple[str, ...], re.Match[str] | None]:
    """(name, placeholders, match) of the most specific subject whose stem starts `key`;
    ('node', (), None) when none does. Only the subjects whose stem begins with the key's
    first segment are tried (one or two patterns, not every subject's)."""
    by_head = _subjects_by_head()
    best: tuple[str, tuple[str, ...], re.Match[str] | None] = ("node", (), None)
    for name, pattern, placeholders in by_head.get(key.partition(".")[0], by_head["{"]):
        if len(placeholders) > len(best[1]) and (match := pattern.match(key)):
            best = (name, placeholders, match)
    return best


def subject_of_key(key: str) -> tuple[str, dict[str, str]]:
    """The most specific subject whose stem starts `key`, with its values:
    'gpu.3.nvlink.5.state' -> ('nvlink', {'gpu': '3', 'link': '5'}); ('node', {}) else."""
    name, placeholders, match = _subject_match(key)
    if match is None:
        return name, {}
    return name, dict(zip(placeholders, match.groups(), strict=True))


def stem_template(key: str, scope: str, values: Mapping[str, str]) -> str:
    """The key with the instance of `scope` (its stem filled with `values`) turned back
    into the stem's placeholders: ('gpu.3.power.limit', 'gpu', {gpu: 3}) ->
    'gpu.{gpu}.power.limit'; the key itself for the node."""
    if scope == "node":
        return key
    stem = SUBJECTS[scope].stem
    return stem + key[len(fill(stem, values)) :]


def template_of(key: str) -> tuple[str, str]:
    """(subject, key template) of a key: gpu.3.power.limit -> (gpu, gpu.{gpu}.power.limit).
    The first lookup of every key of a snapshot asks this (`Catalog.find`): the filled
    stem ends where the match of its last placeholder ends (the stems end with one), so
    no values are collected and no stem filled, as `stem_template` would."""
    name, placeholders, match = _subject_match(key)
    if match is None:
        return name, key
    stem = SUBJECTS[name].stem
    if not stem.endswith("}"):  # a stem ending in literal text: filled as written
        return name, stem_template(key, name, dict(zip(placeholders, match.groups(), strict=True)))
    return name, stem + key[match.end(len(placeholders)) :]


# ------------------------------------------------------------------ key helpers


def natural_key(text: str) -> list[object]:
    """Sort key that orders embedded numbers numerically: node2 < node10. (Here, not in
    gpudiag.hostfs, which keeps its name: judging and diffing a saved snapshot read no
    host file, and do not import it.)"""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


@functools.lru_cache(maxsize=2048)
def key_former(template: str, names: tuple[str, ...]) -> Callable[..., str]:
    """A function of the `names`' values (positional, in order) that fills `template`:
    key_former('gpu.{gpu}.nvlink.{link}.state', ('gpu', 'link'))('3', '5'). The literal
    text is escaped and only the names given are fields, so nothing in a template (a rule
    file's) is ever looked up as an attribute; other placeholders stay as written."""
    parts = PLACEHOLDER_PATTERN.split(template)
    out = []
    for i, part in enumerate(parts):
        if i % 2 == 0:
            out.append(part.replace("{", "{{").replace("}", "}}"))
        elif part in names:
            out.append(f"{{{names.index(part)}}}")
        else:
            out.append(f"{{{{{part}}}}}")
    return "".join(out).format


def fill(template: str, values: Mapping[str, str]) -> str:
    """The template with each placeholder named in `values` replaced by its value."""
    return key_former(template, tuple(values))(*values.values())


@functools.lru_cache(maxsize=4096)
def _literal_ends(template: str) -> tuple[str, str]:
    """The literal text before a template's first placeholder and after its last (the
    whole template when it has none): what every key it stands for starts and ends with."""
    parts = PLACEHOLDER_PATTERN.split(template)
    return (parts[0], parts[-1]) if len(parts) > 1 else (template, "")


@functools.lru_cache(maxsize=4096)
def _whole_key_pattern(template: str) -> re.Pattern[str]:
    """Matches exactly the keys a template stands for."""
    return re.compile(template_regex(template) + r"\Z")


def placeholders_of(template: str) -> set[str]:
    """The placeholder names a template uses."""
    return set(PLACEHOLDER_PATTERN.findall(template))


def template_regex(template: str, capture: bool = False) -> str:
    """A key template as a regular expression of the keys it stands for."""
    parts = PLACEHOLDER_PATTERN.split(template)
    out = []
    for i, part in enumerate(parts):
        if i % 2 == 0:
            out.append(re.escape(part))
        else:
            form = PLACEHOLDER_FORMS.get(part, _SEGMENT)
            out.append(f"({form})" if capture else f"(?:{form})")
    return "".join(out)


def sample_key(template: str) -> str:
    """The template filled with sample values, to look a template up like a key."""
    names = tuple(placeholders_of(template))
    return key_former(template, names)(*(_SAMPLES.get(n, "0") for n in names))


GPU_KEY = re.compile(rf"^gpu\.({INDEX})\.")
_LONG_INDEX = re.compile(rf"(?:^|\.)[0-9]{{{MAX_INDEX_DIGITS + 1},}}(?:\.|$)")


_DIGITS_AS_ZERO = str.maketrans("123456789", "000000000")


def check_key(key: str) -> None:
    """Raise ValueError for a reading key no probe can write: an instance index (an
    all-digit segment) longer than MAX_INDEX_DIGITS."""
    if _LONG_INDEX.search(key):
        raise ValueError(
            f"reading key {key[:40]}...: an instance index of more than {MAX_INDEX_DIGITS} digits"
        )


def check_keys(keys: list[str]) -> None:
    """`check_key` for every key, in one pass in C where no key holds a long run of
    digits (a snapshot's 2,000 keys: 0.15 ms; a regex per key took 9 ms). Called where a
    snapshot's keys are read, so that nothing later parses such an index."""
    if "0" * (MAX_INDEX_DIGITS + 1) in "\n".join(keys).translate(_DIGITS_AS_ZERO):
        for key in keys:
            check_key(key)


def gpu_of(key: str) -> int | None:
    """The GPU index a `gpu.N. ...` key is about, or None."""
    match = GPU_KEY.match(key)
    return int(match.group(1)) if match else None


# GPU_KEY at the start of a line of keys: a search for its literal "\ngpu." runs in C
# (a `^` in MULTILINE is tried at every character), 3x faster than a match per key
_GPU_LINE = re.compile(rf"\ngpu\.({INDEX})\.")


def gpu_indices(keys: Iterable[str]) -> list[int]:
    """Every GPU index that some key (`gpu.N. ...`) mentions, in order."""
    keys = keys if isinstance(keys, (list, tuple, dict)) else list(keys)
    text = "\n" + "\n".join(keys)
    if text.count("\n") != len(keys):  # a key of more than one line: one at a time
        return sorted({int(m.group(1)) for key in keys if (m := GPU_KEY.match(key))})
    return sorted({int(index) for index in set(_GPU_LINE.findall(text))})


def normalize_bus_id(bus_id: str) -> str:
    """NVML's '00000000:18:00.0' -> '0000:18:00.0', the form sysfs uses."""
    domain, _, rest = bus_id.strip().lower().partition(":")
    return f"{int(domain, 16):04x}:{rest}" if rest else bus_id.strip().lower()


_GPU_DEVICE = re.compile(rf"^gpu({INDEX})$")
_NUMA_DEVICE = re.compile(rf"^cpu-numa({INDEX})$")


def device_prefix(device: str) -> str | None:
    """Where a kernel device's readings go: gpu.N., numa.N., node. (all the GPUs, as
    all-reduce drives them) or host.; None if unknown."""
    if m := _GPU_DEVICE.match(device):
        return f"gpu.{m.group(1)}."
    if m := _NUMA_DEVICE.match(device):
        return f"numa.{m.group(1)}."
    if device == "gpus":
        return "node."
    return "host." if device == "cpu" else None


def metric_key(result: KernelResult) -> str:
    """The kernel-relative part of a key: stream.triad.fp64, gemm.bf16, copy.h2d.local."""
    if result.kernel == "stream":
        dtype = dict(result.params).get("dtype", "fp64")
        return f"stream.{result.metric}.{dtype}"
    return f"{result.kernel}.{result.metric}"


_PEER_METRIC = re.compile(rf"^(to|bidir|latency)\.gpu({INDEX})$")
_PEER_FIGURES = {"to": "copy_gbs", "bidir": "copy_bidir_gbs", "latency": "copy_latency_us"}


def kernel_identity(result: KernelResult | Any) -> tuple[str, str, str, str]:
    """What a kernel result measures: (kernel, device, metric, element type). Results
    with one identity are the same measurement (taken again, or on another node); any
    object with those fields will do (the fleet's parsed form)."""
    dtype = str(dict(result.params).get("dtype", ""))
    return result.kernel, result.device, result.metric, dtype


def peer_pair(result: KernelResult) -> str | None:
    """The GPU pair a peer-copy result is about (topo.gpu.I.J), or None for any other."""
    prefix = device_prefix(result.device)
    match = _PEER_METRIC.match(result.metric) if result.kernel == "peer" else None
    if match is None or prefix is None or not prefix.startswith("gpu."):
        return None
    return f"topo.{prefix}{match.group(2)}"


def kernel_key(result: KernelResult) -> str | None:
    """The key of a kernel result's figure: gpu.N.kernel.stream.triad.fp64, or for a peer
    copy topo.gpu.I.J.copy_gbs (copy_bidir_gbs, copy_latency_us); None for a device
    gpudiag does not know."""
    pair = peer_pair(result)
    if pair is not None:
        return f"{pair}.{_PEER_FIGURES[result.metric.split('.')[0]]}"
    prefix = device_prefix(result.device)
    return None if prefix is None else f"{prefix}kernel.{metric_key(result)}"


def is_lost(readings: Mapping[str, Reading], gpu: int | str) -> bool:
    """Whether a GPU stopped answering: its health reading was taken and failed (NVML
    lost it, or the importer saw 'GPU is lost'); one the source never reached (a paste
    cut before its section) is not known lost. The one place this is decided."""
    health = readings.get(f"gpu.{gpu}.health")
    return health is not None and not health.ok and health.status is not ReadingStatus.NOT_REACHED


def not_reached(readings: Mapping[str, Reading], gpu: int | str) -> Reading | None:
    """The health reading of a GPU the source never reached (a paste cut before its
    section: not known, neither lost nor well), or None. The one place this is decided."""
    health = readings.get(f"gpu.{gpu}.health")
    return health if health is not None and health.status is ReadingStatus.NOT_REACHED else None


def lost_gpus(readings: Mapping[str, Reading]) -> list[int]:
    """The GPUs that stopped answering, in order."""
    return [g for g in gpu_indices(readings) if is_lost(readings, g)]


# ------------------------------------------------------------------ declarations


class Change(str, Enum):
    """Whether a reading's value changes between runs of a healthy node."""

    CONFIGURATION = "configuration"  # how the node is set up: "the same" nodes agree
    VOLATILE = "volatile"  # differs between any two healthy runs (temperatures, figures)
    COUNTER = "counter"  # counts up since boot: rising between two snapshots is news


class Kind(str, Enum):
    """How a reading is compared across nodes (the fleet's comparison of each kind):
    counters by rate, positional readings per position (a GPU index's NUMA node across
    alike nodes, never pooled over GPUs), configuration for equality, measurements
    against the spread of alike ones."""

    COUNTER = "counter"  # errors since boot or over a part's life: judged by rate
    POSITIONAL = "positional"  # where a part sits (NUMA node, CPU affinity, link partner)
    CONFIGURATION = "configuration"  # how the node is set up: alike nodes agree
    MEASUREMENT = "measurement"  # a figure that spreads (temperature, draw, kernels)


_set = object.__setattr__  # how a frozen record's own __init__ sets its fields


@record
class Declared:
    """One declared reading (or family of readings, by its key template)."""

    template: str
    unit: str = ""  # "*" where each reading says its own (kernel figures)
    change: Change = Change.CONFIGURATION
    identifying: str = ""  # redaction's placeholder kind where the value names the machine
    group: str = ""  # the screen group it is shown in
    help: str = ""
    producers: frozenset[str] = frozenset()
    positional: bool = False  # a configuration reading that says where a part sits

    def __init__(
        self,
        template: str,
        unit: str = "",
        change: Change = Change.CONFIGURATION,
        identifying: str = "",
        group: str = "",
        help: str = "",
        producers: frozenset[str] = frozenset(),
        positional: bool = False,
    ) -> None:  # written out (record: the generic one binds in a loop): hundreds made
        _set(self, "__dict__", {"template": template, "unit": unit, "change": change,
                                "identifying": identifying, "group": group, "help": help,
                                "producers": producers, "positional": positional})  # fmt: skip

    @property
    def volatile(self) -> bool:
        """Not configuration: differs between healthy nodes or runs (counters too)."""
        return self.change is not Change.CONFIGURATION

    @property
    def kind(self) -> Kind:
        """How the fleet compares it (Kind)."""
        if self.change is Change.COUNTER:
            return Kind.COUNTER
        if self.change is Change.VOLATILE:
            return Kind.MEASUREMENT
        return Kind.POSITIONAL if self.positional else Kind.CONFIGURATION

    @functools.cached_property
    def fields(self) -> tuple[str, ...]:
        """The template's placeholders, in order, each once: ('gpu', 'link')."""
        return tuple(dict.fromkeys(PLACEHOLDER_PATTERN.findall(self.template)))

    @functools.cached_property
    def _field_set(self) -> frozenset[str]:
        return frozenset(self.fields)

    @functools.cached_property
    def _former(self) -> Callable[..., str]:
        """key_former of the template over its fields, in order."""
        return key_former(self.template, self.fields)

    def key(self, **fields: object) -> str:
        """The key of one reading of this declaration, its template filled with `fields`
        (every placeholder, and nothing else): GPU_POWER_LIMIT.key(gpu=3) ->
        'gpu.3.power.limit'. A missing or unknown field is a ValueError: a producer that
        emits through its declaration cannot write a key it did not declare."""
        if fields.keys() != self._field_set:
            raise ValueError(
                f"{self.template}: fields {sorted(fields)} given, {list(self.fields)} needed"
            )
        return self._former(*(fields[name] for name in self.fields))

    def reading(self, value: Value, source: str = "", unit: str = "", **fields: object) -> Reading:
        """A reading taken, under `key(**fields)`, in the declared unit (`unit` only where
        the declaration lets each reading say its own: '*')."""
        return Reading(self.key(**fields), value, self._unit(unit), source)

    def failed(
        self, status: ReadingStatus, reason: str, source: str = "", unit: str = "", **fields: object
    ) -> Reading:
        """A reading that could not be taken, under `key(**fields)`, in the declared unit."""
        return Reading(self.key(**fields), None, self._unit(unit), source, status, reason)

    def _unit(self, unit: str) -> str:
        if self.unit != "*":
            if unit and unit != self.unit:
                raise ValueError(f"{self.template}: unit {unit!r}, declared {self.unit!r}")
            return self.unit
        return unit


def config(template: str, unit: str = "", help: str = "", identifying: str = "") -> Declared:
    """A configuration reading: how the node is set up."""
    return Declared(template, unit, Change.CONFIGURATION, identifying, help=help)


def position(template: str, unit: str = "", help: str = "", identifying: str = "") -> Declared:
    """A positional configuration reading: where a part sits (a GPU's NUMA node, CPU
    affinity, bus id, link partner), compared per position across alike nodes."""
    return Declared(template, unit, Change.CONFIGURATION, identifying, help=help, positional=True)


def volatile(template: str, unit: str = "", help: str = "", identifying: str = "") -> Declared:
    """A reading whose value differs between healthy runs."""
    return Declared(template, unit, Change.VOLATILE, identifying, help=help)


def counter(template: str, unit: str = "", help: str = "") -> Declared:
    """A counter since boot: non-zero is news, and so is rising between two snapshots."""
    return Declared(template, unit, Change.COUNTER, help=help)


def declare(group: str, *readings: Declared) -> tuple[Declared, ...]:
    """A producer's declarations, all shown in one screen group."""
    return tuple(replace(d, group=d.group or group) for d in readings)


@record
class Also:
    """Readings a producer makes that another producer declares in full (the importer
    writes the GPU probe's keys): the same meaning, a second producer."""

    templates: tuple[str, ...]

    @functools.cached_property
    def _declared(self) -> dict[str, Declared]:
        return {t: Declared(t) for t in self.templates}

    def key(self, template: str, **fields: object) -> str:
        """The key of a reading of `template`, one of these, filled as Declared.key fills
        it: a KeyError for a template not among them (the unit is the full
        declaration's, which this producer cannot see: the contract test compares)."""
        found = self._declared.get(template)
        if found is None:
            raise KeyError(f"{template}: not among the templates this producer makes")
        return found.key(**fields)


def also(*templates: str) -> Also:
    """Templates this producer makes, declared in full by another producer."""
    return Also(tuple(templates))


# screen groups in the order the host screen shows them; groups not listed follow in the
# order their producers are registered
GROUP_ORDER = (
    "Host and OS",
    "CPU",
    "NUMA",
    "Memory",
    "BIOS and board",
    "Platform",
    "Power",
    "Kernel",
    "IOMMU",
    "PCIe",
    "Faults",
    "Driver (NVML)",
)
# groups shown on screens of their own, not in the host tree
NOT_HOST_GROUPS = frozenset({"GPU", "GPU topology", "Kernel results"})


class CatalogError(Exception):
    """Two producers declare one template differently, or an `also` names nothing."""


@record(frozen=False)
class Catalog:
    """Every declared reading, looked up by key."""

    declared: dict[str, Declared] = field(default_factory=dict)
    _by_head: dict[str, list[Declared]] = field(default_factory=dict)

    @classmethod
    def build(cls, producers_and_items: Iterable[tuple[str, Iterable[Declared | Also]]]) -> Catalog:
        """From (producer name, declarations) pairs; a template declared twice must be
        declared alike (its producers are joined)."""
        first: dict[str, tuple[Declared, str]] = {}
        producers: dict[str, set[str]] = {}
        pending: list[tuple[str, str]] = []
        for producer, items in producers_and_items:
            for item in items:
                if isinstance(item, Also):
                    pending.extend((producer, t) for t in item.templates)
                    continue
                known = first.setdefault(item.template, (item, producer))
                if known[0] is not item and known[0] != item:
                    raise CatalogError(
                        f"{item.template}: declared differently by {known[1]} and {producer}"
                    )
                producers.setdefault(item.template, set()).add(producer)
        for producer, template in pending:
            if template not in first:
                raise CatalogError(f"{template}: {producer} makes it but nobody declares it")
            producers[template].add(producer)
        declared = {
            t: Declared(
                d.template,
                d.unit,
                d.change,
                d.identifying,
                d.group,
                d.help,
                frozenset(producers[t]),
                d.positional,
            )
            for t, (d, _) in first.items()
        }
        return cls.from_declared(declared)

    @classmethod
    def from_declared(cls, declared: dict[str, Declared]) -> Catalog:
        """From declarations already joined, one a template (their producers joined)."""
        catalog = cls(declared)
        catalog._index()
        return catalog

    def _index(self) -> None:
        by_head: dict[str, list[Declared]] = {}
        for d in self.declared.values():
            by_head.setdefault(d.template.split(".", 1)[0], []).append(d)
        for items in by_head.values():
            # the most literal first: a wide placeholder ({metric}) only where nothing else fits
            items.sort(key=lambda d: ("{metric}" in d.template, -len(d.template)))
        self._by_head = by_head

    @functools.lru_cache(maxsize=65536)  # noqa: B019 - one catalog per process
    def find(self, key: str) -> Declared | None:
        """The declaration that covers `key`, or None when nobody declares it."""
        # the common case without a pattern: a key of a subject, as its template
        exact = self.declared.get(template_of(key)[1])
        if exact is not None and "{metric}" not in exact.template:
            return exact
        # else the first template under the key's head (most literal first) that the
        # whole key matches; only those whose literal start and end the key has are
        # matched, each template's pattern compiled when first needed
        for declared in self._by_head.get(key.split(".", 1)[0], ()):
            start, end = _literal_ends(declared.template)
            if (
                key.startswith(start)
                and key.endswith(end)
                and len(key) >= len(start) + len(end)
                and _whole_key_pattern(declared.template).match(key)
            ):
                return declared
        return None

    def __hash__(self) -> int:
        return id(self)

    def covers(self, template: str) -> bool:
        """Whether some declaration covers a key template (a rule's)."""
        return self.find(sample_key(template)) is not None

    def producers(self, key: str) -> frozenset[str]:
        """Who makes `key` (empty when nobody declares it)."""
        found = self.find(key)
        return found.producers if found else frozenset()


# the snapshot's result that holds the derived readings (gpudiag/derive.py), and the
# producers of what it holds: derived from the snapshot's other readings and kernel
# results, wherever a live probe ran
DERIVED = "derived"
DERIVED_PRODUCERS = frozenset({"topology", "profile", "kernels"})
# the result that holds `gpudiag --export`'s GPU performance counter window
# (gpudiag/telemetry/readings.py): taken beside the probes, not one of them
COUNTERS = "telemetry"


@functools.lru_cache(maxsize=8)
def _passes(
    subjects: tuple[Subject, ...],
) -> tuple[tuple[str, re.Pattern[str], tuple[Subject, ...]], ...]:
    """One regular-expression pass per key head: its subjects' stems in one pattern where
    one nests in the other (a GPU and its NVLinks: gpu.N and gpu.N.nvlink.M), whose
    groups are the outer subject's values, then the inner one's (empty where absent)."""
    passes = []
    by_head: dict[str, list[Subject]] = {}
    for subject in subjects:
        if subject.head:
            by_head.setdefault(subject.head, []).append(subject)
    for head, found in by_head.items():
        found.sort(key=lambda s: len(s.stem))
        outer, *inner = found
        if len(inner) == 1 and inner[0].stem.startswith(outer.stem + "."):
            rest = template_regex(inner[0].stem[len(outer.stem) :], capture=True)
            outer_regex = template_regex(outer.stem, capture=True)
            pattern = re.compile(f"^{outer_regex}(?:{rest})?(?:\\.|$)", re.M)
            passes.append((head, pattern, (outer, inner[0])))
        else:
            passes.extend((head, s.instance_pattern, (s,)) for s in found)
    return tuple(passes)


@functools.lru_cache(maxsize=32)
def _at_line_starts(pattern: re.Pattern[str]) -> re.Pattern[str]:
    """A `^...` MULTILINE pattern with its `^` as a literal "\\n", for a text of lines
    that each follow a "\\n": the same matches, found by a search for the pattern's
    literal start in C (`^` is tried at every character; the search is about half of a
    64-GPU index, and a third faster so, standalone)."""
    assert pattern.pattern.startswith("^")
    return re.compile("\n" + pattern.pattern[1:], pattern.flags)


def _index_order(part: str) -> tuple[int, int, str]:
    """Instances in numeric order (gpu 2 before gpu 10), any other part after, by text;
    never an int of more than MAX_INDEX_DIGITS digits, never int against str."""
    if part.isascii() and part.isdigit() and len(part) <= MAX_INDEX_DIGITS:
        return (0, int(part), "")
    return (1, 0, part)


def _ordered(values: Iterable[tuple[str, ...]]) -> list[tuple[str, ...]]:
    distinct = set(values)
    # each part's order once (64 GPUs' 4,032 pairs have 64 distinct parts)
    order = {part: _index_order(part) for part in {p for v in distinct for p in v}}
    index = order.__getitem__
    return sorted(distinct, key=lambda v: tuple(map(index, v)))


@record
class SubjectIndex:
    """The instances of every subject in one set of readings: the keys grouped by their
    first segment, then one pass per group (the GPUs and their NVLinks in one)."""

    by_scope: dict[str, list[tuple[str, ...]]]

    @classmethod
    def of(cls, keys: Iterable[str]) -> SubjectIndex:
        """The index of `keys` (a dict of readings gives its keys)."""
        passes = _passes(tuple(SUBJECTS.values()))
        groups: dict[str, list[str]] = {head: [] for head, _, _ in passes}
        group_of = groups.get
        for key in keys:  # a key without a dot matches no stem, in whichever group
            group = group_of(key.partition(".")[0])
            if group is not None:
                group.append(key)
        by_scope: dict[str, list[tuple[str, ...]]] = {"node": [()]}
        for head, pattern, subjects in passes:
            text = "\n" + "\n".join(groups[head])
            if text.count("\n") == len(groups[head]):  # one line a key: "\n" starts each
                matches = _at_line_starts(pattern).findall(text)
            else:
                matches = pattern.findall(text[1:])
            if len(subjects) == 1:  # each instance once before it is made a tuple
                by_scope[subjects[0].name] = _ordered(
                    m if isinstance(m, tuple) else (m,) for m in set(matches)
                )
                continue
            outer, inner = subjects
            width = len(outer.placeholders)
            distinct = set(matches)
            by_scope[outer.name] = _ordered(m[:width] for m in distinct)
            by_scope[inner.name] = _ordered(m for m in distinct if m[width])
        return cls(by_scope)
