"""The catalog of everything gpudiag ships, assembled from the producers' declarations,
and the questions asked of it: a key's declaration (`find`), whether it is volatile,
configuration, a counter or a kernel reading, its screen group, its template's parts, which
sources can hold it.

It stands above the registries (the probes, the nvidia-smi importers, the kernel readings,
the derivations, the Slurm GRES reader), which declare their readings with the vocabulary
of gpudiag/catalog.py and never import this module; the consumers (the rules engine, the
views, the diff, the fleet, the redaction, the command line) ask it.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Mapping

from gpudiag.catalog import (
    DERIVED,
    DERIVED_PRODUCERS,
    GROUP_ORDER,
    NOT_HOST_GROUPS,
    PLACEHOLDER_PATTERN,
    Catalog,
    Change,
    Declared,
    Kind,
    fill,
    stem_template,
    subject_of_key,
    template_regex,
)
from gpudiag.inputs import compiled_module

TYPE_CHECKING = False  # pathlib is imported where a Path is made (diff does without it)
if TYPE_CHECKING:
    from pathlib import Path


@functools.lru_cache(maxsize=1)
def catalog() -> Catalog:
    """The catalog of everything gpudiag ships: the registered probes', the importer's,
    the kernel readings' and the derived readings' declarations. From the compiled
    module (gpudiag/shipped_compiled.py) while the producers' source files are the ones
    it was made from; else assembled from the producers (`built_catalog`), which imports
    every probe, importer and derivation."""
    compiled = _compiled_catalog()
    return compiled if compiled is not None else built_catalog()


def built_catalog() -> Catalog:
    """The catalog assembled from the producers' declarations."""
    from gpudiag import derive, importing, slurmgres
    from gpudiag.kernels import readings as kernel_readings
    from gpudiag.probes import REGISTRY, topology
    from gpudiag.telemetry.readings import PRODUCER as COUNTERS
    from gpudiag.telemetry.readings import READINGS as COUNTER_READINGS

    return Catalog.build(
        [
            *((probe.name, probe.readings) for probe in REGISTRY),
            ("topology", topology.READINGS),
            ("profile", derive.READINGS),
            ("kernels", kernel_readings.READINGS),
            ("import", importing.READINGS),
            (slurmgres.PRODUCER, slurmgres.READINGS),
            (COUNTERS, COUNTER_READINGS),
        ]
    )


# ------------------------------------------------------------------ the compiled catalog

# gpudiag/shipped_compiled.py: the built catalog's declarations as Python literals, with the
# fingerprint of the source files they are declared in. Assembling the catalog imports
# every probe, importer and derivation (about 100 ms, most of a one-shot `gpudiag diff`);
# the compiled module answers the same questions without importing them. Where any of
# those files differs from the ones compiled (an edit in a checkout), the catalog is
# built from the producers, never read stale. tests/test_shipped_compiled.py fails when
# the module is stale and names the command that writes it again.
COMPILED_MODULE = "shipped_compiled.py"
# the modules and packages the declarations are written in (and the vocabulary's)
_DECLARING_MODULES = ("catalog", "derive", "slurmgres", "probe", "shipped")
# package -> its declaring modules (None: every module of it)
_DECLARING_PACKAGES: dict[str, tuple[str, ...] | None] = {
    "gpudiag.probes": None,
    "gpudiag.importing": None,
    "gpudiag.kernels": ("readings.py",),
    "gpudiag.telemetry": ("readings.py",),
}


def declaring_files() -> list[Path]:
    """The source files the shipped declarations are written in: the producers' modules
    and packages, found without importing them."""
    from pathlib import Path

    return [Path(path) for path in _declaring_paths()]


def _declaring_paths() -> list[str]:
    """`declaring_files` as text (os.path: every check and diff asks it, and pathlib is
    not imported for it)."""
    from importlib.util import find_spec

    here = os.path.dirname(__file__)
    files = [os.path.join(here, f"{name}.py") for name in _DECLARING_MODULES]
    for package, names in _DECLARING_PACKAGES.items():
        spec = find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise FileNotFoundError(package)
        for folder in spec.submodule_search_locations:
            found = names or sorted(n for n in os.listdir(folder) if n.endswith(".py"))
            files += [os.path.join(folder, name) for name in found]
    return files


def declaring_fingerprint() -> tuple[int, int]:
    """(CRC-32, number of files) over the names and bytes of `declaring_files`."""
    import zlib

    crc, files = 0, _declaring_paths()
    for path in files:
        with open(path, "rb") as source:
            data = source.read()
        crc = zlib.crc32(os.path.basename(path).encode() + b"\0" + data, crc)
    return crc, len(files)


def compiled_module_text() -> str:
    """The text of gpudiag/shipped_compiled.py for the catalog the producers declare now."""
    import pprint

    entries = tuple(
        (
            d.template,
            d.unit,
            d.change.value,
            d.identifying,
            d.group,
            d.help,
            sorted(d.producers),
            d.positional,
        )
        for d in built_catalog().declared.values()
    )
    return (
        '"""The shipped catalog\'s declarations (gpudiag/shipped.py, COMPILED_MODULE).\n\n'
        "Generated: do not edit. After changing a producer's declarations, write it again with\n"
        "    GPUDIAG_UPDATE_GOLDEN=1 .venv/bin/python -m pytest -q tests/test_shipped_compiled.py\n"
        "Where the declaring files no longer match FINGERPRINT, the catalog is built from the\n"
        'producers instead.\n"""\n\n'
        f"FINGERPRINT = {declaring_fingerprint()!r}\n"
        "# (template, unit, change, identifying, group, help, producers, positional), in\n"
        "# declaration order\n"
        f"DECLARED = {pprint.pformat(entries, width=100)}\n"
    )


def _compiled_catalog() -> Catalog | None:
    """The catalog from gpudiag/shipped_compiled.py, or None where it is missing or made
    from other source files than these."""
    shipped_compiled = compiled_module("gpudiag.shipped_compiled")  # None: damaged
    try:
        if tuple(getattr(shipped_compiled, "FINGERPRINT", ())) != declaring_fingerprint():
            return None
    except OSError:  # a declaring file not on disk (a zip install): build it
        return None
    entries = getattr(shipped_compiled, "DECLARED", None)
    if not isinstance(entries, tuple):
        return None  # cut short after its fingerprint
    # made by compiled_module_text from a built catalog: one entry a template, with all
    # its producers, in the catalog's order; taken as it is (what Catalog.build gives from
    # it, without building each declaration twice: 1.3 ms of every check and diff)
    declared = {
        template: Declared(
            template,
            unit,
            Change(change),
            identifying,
            group,
            help_,
            frozenset(producers),
            positional,
        )
        for template, unit, change, identifying, group, help_, producers, positional in entries
    }
    if len(declared) == len(entries):
        return Catalog.from_declared(declared)
    return Catalog.build(  # a template twice: build says whether its entries agree
        (producer, (declared,))
        for template, unit, change, identifying, group, help_, producers, positional in (
            shipped_compiled.DECLARED
        )
        for declared in (
            Declared(
                template, unit, Change(change), identifying, group, help_, positional=positional
            ),
        )
        for producer in producers
    )


def find(key: str) -> Declared | None:
    """The shipped declaration of `key`, or None."""
    return catalog().find(key)


def is_volatile(key: str) -> bool:
    """A value that differs between healthy nodes or runs; an undeclared key counts as
    volatile (never grouped on, never written into a baseline)."""
    found = catalog().find(key)
    return found is None or found.volatile


def is_configuration(key: str) -> bool:
    """A declared reading that says how the node is set up."""
    return not is_volatile(key)


def is_kernel_reading(key: str) -> bool:
    """A reading derived from kernel results (a measured figure, which differs from run
    to run: the diff and the fleet compare the kernel results themselves instead)."""
    return "kernels" in catalog().producers(key)


def is_counter(key: str) -> bool:
    """A counter since boot."""
    found = catalog().find(key)
    return found is not None and found.change is Change.COUNTER


def kind_of(key: str) -> Kind:
    """How the fleet compares a reading (catalog.Kind); an undeclared key is a
    measurement (compared against the spread of alike ones, never grouped on)."""
    found = catalog().find(key)
    return found.kind if found else Kind.MEASUREMENT


def identifying_kind(key: str) -> str:
    """Redaction's placeholder kind where the reading's value identifies the machine."""
    found = catalog().find(key)
    return found.identifying if found else ""


def group_of(key: str) -> str:
    """The screen group a reading is shown in ('' when undeclared)."""
    found = catalog().find(key)
    return found.group if found else ""


@functools.lru_cache(maxsize=1024)
def _capturing(template: str) -> re.Pattern[str]:
    return re.compile(template_regex(template, capture=True) + r"\Z")


@functools.lru_cache(maxsize=65536)
def parts(key: str) -> tuple[str, dict[str, str]]:
    """A key taken apart by the template that declares it: (template, its placeholders'
    values): topo.gpu.2.nic.0000:19:00.0 -> (topo.gpu.{gpu}.nic.{nic}, {gpu: 2, nic: ...}).
    An undeclared key is taken apart by its subject's stem (template_of), else it is its
    own template with no values."""
    found = catalog().find(key)
    if found is not None:
        match = _capturing(found.template).match(key)
        if match is not None:
            names = PLACEHOLDER_PATTERN.findall(found.template)
            return found.template, dict(zip(names, match.groups(), strict=True))
    scope, values = subject_of_key(key)
    return stem_template(key, scope, values), values


# the placeholders whose values are GPU indices
GPU_PLACEHOLDERS = ("gpu", "peer")


def gpus_of(key: str) -> tuple[str, ...]:
    """The GPU indices a key is about (a GPU's, a GPU pair's, a GPU and a NIC's), as text;
    () for a node-wide key."""
    values = parts(key)[1]
    return tuple(values[n] for n in GPU_PLACEHOLDERS if n in values)


def renumber_gpus(key: str, mapping: Mapping[str, str]) -> str:
    """The key with its GPU indices mapped (another node's GPU 3 is this node's GPU 5)."""
    template, values = parts(key)
    if not any(n in values for n in GPU_PLACEHOLDERS):
        return key
    renamed = {n: mapping.get(v, v) if n in GPU_PLACEHOLDERS else v for n, v in values.items()}
    return fill(template, renamed)


def host_groups() -> list[str]:
    """The host screen's groups, in order."""
    seen = [g for g in GROUP_ORDER]
    for d in catalog().declared.values():
        if d.group not in seen and d.group not in NOT_HOST_GROUPS:
            seen.append(d.group)
    return seen


# ------------------------------------------------------------------ which source holds what


def can_hold(sources: Iterable[str], key: str) -> bool:
    """Whether any of these sources (probe names) can hold `key`: a probe that declares
    it; a derived reading wherever a live probe ran; an nvidia-smi import (import-KIND)
    holds what it wrote, which is never absent; a source not known here holds anything
    (not knowing is never turned into a pass)."""
    producers = catalog().producers(key)
    for name in sources:
        if name.startswith("import-") or name == DERIVED:
            continue  # the derived result holds what the sources' readings give
        if name not in _known_sources():
            return True
        if name in producers or producers & DERIVED_PRODUCERS:
            return True
    return False


@functools.lru_cache(maxsize=1)
def _known_sources() -> frozenset[str]:
    return frozenset(p for d in catalog().declared.values() for p in d.producers)


def describe(sources: Iterable[str]) -> str:
    """The sources in words, for a not-applicable finding's message (the derived result
    is no source of its own: it holds what the others' readings give)."""
    names = sorted(set(sources) - {DERIVED})
    imports = [n.removeprefix("import-") for n in names if n.startswith("import-")]
    if imports and len(imports) == len(names):
        smi = [kind for kind in imports if kind not in PASTED]
        parts = [f"nvidia-smi {', '.join(smi)} output"] if smi else []
        return "an import of " + " and ".join(parts + [PASTED[k] for k in imports if k in PASTED])
    return "probes " + ", ".join(names)


# the imports of what is pasted besides nvidia-smi's outputs (gpudiag/importing/pastes.py)
PASTED = {
    "dcgmi-diag": "a dcgmi diag table",
    "fabric": "an nvidia-smi -q Fabric section",
    "kernel-log": "kernel-log Xid lines",
}


# ------------------------------------------------------------------ instances of subjects
