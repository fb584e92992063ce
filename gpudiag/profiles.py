"""GPU-model profiles: what each model (by PCI device id) or class of GPU (GeForce,
workstation cards) should reach, from rules/profiles.toml; rules compare readings with
them (`min_profile`, ...) and the kernel readings take shares of their peaks."""

from __future__ import annotations

import functools
import os
import re
from collections import Counter

from gpudiag import catalog
from gpudiag.inputs import compiled_module, text_fingerprint
from gpudiag.model import Reading
from gpudiag.record import field, field_names, record
from gpudiag.rule_operators import RuleError

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from typing import Any


@record
class Profile:
    """Expected values for one GPU model, keyed by PCI device id; or for a class of GPU
    (GeForce, workstation cards), matched by brand or by words of the product name when
    no model's device id matches."""

    name: str
    title: str
    device_ids: tuple[str, ...]
    values: dict[str, Any] = field(default_factory=dict)
    brands: tuple[str, ...] = ()
    name_words: tuple[str, ...] = ()
    product_names: tuple[str, ...] = ()
    # (field, where its figure comes from): every figure's source, a band's floor
    # (BAND_FIELDS) with how it was measured, or why a band is not set
    sources: tuple[tuple[str, str], ...] = ()
    # A CPU profile (its memory, per CPU: one NUMA node with CPUs) is matched by the CPU's
    # MIDR part, the memory on its node (GB as marketed) and the GPUs on that node, never
    # by a GPU (cpu_profile); a GPU profile leaves these empty
    cpu_parts: tuple[str, ...] = ()
    cpu_memory_gb: tuple[int, ...] = ()
    cpu_gpus: tuple[int, ...] = ()

    def source(self, field: str) -> str:
        """Where the profile's figure `field` comes from ("" where nothing says)."""
        return dict(self.sources).get(field, "")


# what a class of GPU has, true or false (a GeForce card has no ECC memory)
PROFILE_FLAGS = {"ecc", "persistence_mode"}
PROFILE_FIELDS = {
    "memory_gb",
    "nvlink_count",
    "nvlink_min_active",
    "nvlink_gbs",
    "pcie_gen",
    "pcie_width",
    "power_limit_w",
    "max_sm_clock_mhz",
    "max_mem_clock_mhz",
    "memory_bandwidth_gbs",
    "fp64_tflops",
    "fp64_tensor_tflops",
    "fp32_tflops",
    "tf32_tflops",
    "bf16_tflops",
    "fp16_tflops",
    "fp8_tflops",
    "fp4_tflops",
    "l2_mb",
    "nvlink_line_gbs",
    "nvlink_bandwidth_gbs",
}
# Healthy bands: what a healthy GPU of the model measured, as a fraction of the peak the
# band names (`of`), and the floor a KRN rule warns under (also a fraction of that peak).
# band name -> (the computed field rules read: floor x peak, the peak fields it may name)
BANDS = {
    "stream_triad": ("stream_triad_floor_gbs", ("memory_bandwidth_gbs",)),
    "gemm_fp64": ("gemm_fp64_floor_tflops", ("fp64_gemm_tflops",)),
    "gemm_fp16": ("gemm_fp16_floor_tflops", ("fp16_tflops",)),
    "gemm_bf16": ("gemm_bf16_floor_tflops", ("bf16_tflops",)),
    "peer_copy": ("peer_copy_floor_gbs", ("nvlink_bandwidth_gbs",)),
}
BAND_KEYS = {"of", "healthy", "measured", "floor", "source", "floor_source", "published"}
# Computed from the fields above, never written in a profiles file; rules read them as
# they read the others. fp64_gemm_tflops: what an FP64 GEMM can reach, the FP64 Tensor
# Core figure where the model has one (cuBLAS's DGEMM runs there: 55.7 TFLOP/s measured on
# an H100, whose vector FP64 is 34 and its tensor cores' 67), else the vector figure.
COMPUTED_FIELDS = {"fp64_gemm_tflops", *(field for field, _ in BANDS.values())}
READABLE_FIELDS = PROFILE_FIELDS | COMPUTED_FIELDS


def _computed(values: dict[str, Any]) -> dict[str, Any]:
    """COMPUTED_FIELDS from a profile's own values."""
    fp64 = [values[k] for k in ("fp64_tflops", "fp64_tensor_tflops") if k in values]
    return {"fp64_gemm_tflops": max(fp64)} if fp64 else {}


def parse_profiles(text: str, origin: str) -> dict[str, Profile]:
    """Parse a profiles file: `[profile.NAME]` tables with `title`, `device_ids`, an
    optional `inherits` (another profile's name) and numeric fields from PROFILE_FIELDS."""
    from gpudiag import tomlcompat

    try:
        data = tomlcompat.loads(text)
    except tomlcompat.TOMLDecodeError as exc:
        raise RuleError(f"{origin}: not valid TOML: {exc}") from None
    if set(data) != {"profile"} or not isinstance(data["profile"], dict):
        raise RuleError(f"{origin}: a profiles file holds [profile.NAME] tables only")
    raw: dict[str, dict[str, Any]] = data["profile"]
    profiles: dict[str, Profile] = {}
    band_specs: dict[str, dict[str, Any]] = {}  # each profile's bands, its parents' included

    def build(name: str, seen: tuple[str, ...] = ()) -> Profile:
        if name in profiles:
            return profiles[name]
        if name in seen:
            raise RuleError(f"{origin}: profile {name}: inheritance loops through {seen}")
        table = raw.get(name)
        if not isinstance(table, dict):
            raise RuleError(f"{origin}: no profile named {name!r}")
        unknown = (
            set(table)
            - PROFILE_FIELDS
            - PROFILE_FLAGS
            - {"title", "device_ids", "inherits", "brands", "name_words", "product_names"}
            - {"source", "band", *CPU_KEYS}
        )
        if unknown:
            raise RuleError(
                f"{origin}: profile {name}: unknown key(s) {', '.join(sorted(unknown))}"
            )
        values: dict[str, Any] = {}
        sources: dict[str, str] = {}
        if "inherits" in table:
            parent = build(str(table["inherits"]), (*seen, name))
            values.update(parent.values)
            sources.update(parent.sources)
        specs = dict(band_specs.get(str(table.get("inherits")), {}))
        own = table.get("band", {})
        specs.update(own if isinstance(own, dict) else {"": own})
        band_specs[name] = specs
        for key in PROFILE_FIELDS & set(table):
            value = table[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise RuleError(f"{origin}: profile {name}: {key} must be a number")
            values[key] = value
        for key in PROFILE_FLAGS & set(table):
            if not isinstance(table[key], bool):
                raise RuleError(f"{origin}: profile {name}: {key} must be true or false")
            values[key] = table[key]
        values.update(_computed(values))
        sources.update(_sources(table, f"{origin}: profile {name}"))
        where = f"{origin}: profile {name}"
        for band, (floor_field, value, text) in _bands(specs, values, where).items():
            values.pop(floor_field, None)
            if value is not None:
                values[floor_field] = value
            sources[floor_field] = text
            sources[f"band.{band}"] = text
        words = {}
        for key in ("brands", "name_words", "product_names"):
            words[key] = table.get(key, [])
            if not isinstance(words[key], list) or not all(isinstance(w, str) for w in words[key]):
                raise RuleError(f"{origin}: profile {name}: {key} is a list of strings")
        ids = table.get("device_ids", [])
        if not isinstance(ids, list) or not all(
            isinstance(i, str) and re.fullmatch(r"0x[0-9a-f]{4}", i) for i in ids
        ):
            raise RuleError(f"{origin}: profile {name}: device_ids are like '0x2330'")
        profiles[name] = Profile(
            name,
            str(table.get("title", name)),
            tuple(ids),
            values,
            tuple(words["brands"]),
            tuple(words["name_words"]),
            tuple(words["product_names"]),
            tuple(sorted(sources.items())),
            *_cpu_keys(table, where),
        )
        return profiles[name]

    for name in raw:
        build(name)
    return profiles


# a CPU profile's keys: MIDR parts ('0xd4f'), GB of memory per CPU, GPUs per CPU
CPU_KEYS = ("cpu_parts", "cpu_memory_gb", "cpu_gpus")


def _cpu_keys(
    table: dict[str, Any], where: str
) -> tuple[tuple[str, ...], tuple[int, ...], tuple[int, ...]]:
    """A CPU profile's cpu_parts, cpu_memory_gb and cpu_gpus (all three, or none)."""
    given = [key for key in CPU_KEYS if key in table]
    if not given:
        return (), (), ()
    parts, memory, gpus = (table.get(key) for key in CPU_KEYS)
    if (
        len(given) != len(CPU_KEYS)
        or not isinstance(parts, list)
        or not all(isinstance(p, str) and re.fullmatch(r"0x[0-9a-f]{3}", p) for p in parts)
        or not all(
            isinstance(items, list)
            and items
            and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in items)
            for items in (memory, gpus)
        )
    ):
        raise RuleError(
            f"{where}: a CPU profile has cpu_parts (MIDR parts like '0xd4f'), cpu_memory_gb "
            "and cpu_gpus (lists of whole numbers)"
        )
    assert isinstance(memory, list) and isinstance(gpus, list)
    return tuple(parts), tuple(memory), tuple(gpus)


def cpu_profile(
    profiles: dict[str, Profile], part: str, memory_gb: float, gpus: int
) -> Profile | None:
    """The CPU profile of a CPU of this MIDR part with this much memory on its NUMA node
    (GB; within a quarter of a listed size: the kernel's MemTotal is the marketed size
    less what the firmware keeps) and this many GPUs on the node; None where none is."""
    for profile in profiles.values():
        if (
            part in profile.cpu_parts
            and gpus in profile.cpu_gpus
            and any(0.8 <= memory_gb / size <= 1.25 for size in profile.cpu_memory_gb if size)
        ):
            return profile
    return None


def _sources(table: dict[str, Any], where: str) -> dict[str, str]:
    """A profile's `[[profile.NAME.source]]` entries (`fields`, `text`) as field -> text;
    each field is one the profile sets itself, named once."""
    entries = table.get("source", [])
    if not isinstance(entries, list):
        raise RuleError(f"{where}: source is a list of [[...source]] tables")
    out: dict[str, str] = {}
    for entry in entries:
        fields, text = (
            (entry.get("fields"), entry.get("text")) if isinstance(entry, dict) else (None, None)
        )
        if (
            set(entry) != {"fields", "text"}
            or not isinstance(text, str)
            or not text.strip()
            or not isinstance(fields, list)
            or not all(isinstance(f, str) for f in fields)
        ):
            raise RuleError(f"{where}: a source has `fields` (a list of names) and `text`")
        for name in fields:
            if name not in PROFILE_FIELDS:
                raise RuleError(f"{where}: source names {name!r}, no profile field")
            if name in out:
                raise RuleError(f"{where}: {name}'s source is given twice")
            out[name] = " ".join(text.split())
    return out


def _bands(
    bands: dict[str, Any], values: dict[str, Any], where: str
) -> dict[str, tuple[str, float | None, str]]:
    """A profile's `[profile.NAME.band.BAND]` tables (its parents' too: a floor is scaled
    by the profile's own peak) as band -> (its computed field, the floor in the peak's
    unit or None where no band is published, the text saying so)."""
    out: dict[str, tuple[str, float | None, str]] = {}
    for band, spec in bands.items():
        if band not in BANDS or not isinstance(spec, dict):
            raise RuleError(f"{where}: unknown band {band!r} (known: {', '.join(BANDS)})")
        field, peaks = BANDS[band]
        unknown = set(spec) - BAND_KEYS
        if unknown:
            raise RuleError(f"{where}: band {band}: unknown key(s) {', '.join(sorted(unknown))}")
        source = spec.get("source")
        if not isinstance(source, str) or not source.strip():
            raise RuleError(f"{where}: band {band} needs its source")
        source = " ".join(source.split())
        if spec.get("published", True) is False:
            out[band] = (field, None, f"no healthy band published: {source}")
            continue
        of = spec.get("of")
        numbers = [spec.get(k) for k in ("healthy", "floor")]
        if of not in peaks or not all(
            isinstance(n, int | float) and not isinstance(n, bool) and 0 < n <= 1 for n in numbers
        ):
            raise RuleError(
                f"{where}: band {band} is `of` {' or '.join(peaks)} with `healthy` and `floor` "
                "fractions of it (0 < floor <= healthy <= 1)"
            )
        healthy, floor = float(numbers[0]), float(numbers[1])
        peak = values.get(of)
        if floor > healthy or not isinstance(peak, int | float):
            raise RuleError(f"{where}: band {band}: floor over healthy, or no {of} to scale")
        measured = spec.get("measured")
        if measured is not None and (
            not isinstance(measured, int | float) or abs(measured / peak - healthy) > 0.005
        ):
            raise RuleError(
                f"{where}: band {band}: healthy {healthy:g} is not measured {measured} over "
                f"{of} {peak:g} ({measured / peak:.3f})"
            )
        why = spec.get("floor_source")
        if not isinstance(why, str) or not why.strip():
            raise RuleError(f"{where}: band {band} needs floor_source: how its floor was set")
        value = round(floor * float(peak), 6)
        text = (
            f"floor {floor:g} x {of} {peak:g} = {value:g}; healthy {healthy:g} ({source}); "
            f"floor: {' '.join(why.split())}"
        )
        out[band] = (field, value, text)
    return out


def load_profiles() -> dict[str, Profile]:
    """The shipped GPU-model profiles (rules/profiles.toml), parsed once per process (every
    judgment needs them: the TUI judges again on each refresh)."""
    return dict(_shipped_profiles())


@functools.cache
def _shipped_profiles() -> dict[str, Profile]:
    """rules/profiles.toml's profiles: from the compiled rules module (rules/compiled.py,
    PROFILES) while the file's text is the one compiled, else parsed from its TOML."""
    with open(shipped_profiles_path(), encoding="utf-8") as file:
        text = file.read()
    compiled = _compiled_profiles(text)
    return compiled if compiled is not None else parse_profiles(text, PROFILES_ORIGIN)


# rules/compiled.py's PROFILES: rules/profiles.toml parsed and checked ahead, beside the
# compiled rules (a TOML parse costs a `gpudiag check` more than judging the snapshot),
# with the fingerprint of the text it was made from; an edited profiles.toml no longer
# matches it and is parsed from its text. tests/test_rules_compiled.py holds the two alike.
PROFILES_ORIGIN = "rules/profiles.toml"
_PROFILE_ATTRS = field_names(Profile)


def shipped_profiles_path() -> str:
    """The shipped profiles file (in the `gpudiag.rules` package, on disk): its path as
    text (os.path: `check` does not import pathlib for it)."""
    import gpudiag.rules

    return os.path.join(os.path.dirname(gpudiag.rules.__file__), "profiles.toml")


def compiled_profiles(text: str) -> tuple[Any, ...]:
    """The PROFILES entry of rules/compiled.py for this profiles.toml text: (fingerprint,
    Profile's fields, each profile's field values in order, its values sorted by name)."""
    plain = []
    for profile in parse_profiles(text, PROFILES_ORIGIN).values():
        values = []
        for name in _PROFILE_ATTRS:
            value = getattr(profile, name)
            values.append(tuple(sorted(value.items())) if name == "values" else value)
        plain.append(tuple(values))
    return (text_fingerprint(text), _PROFILE_ATTRS, tuple(plain))


def _compiled_profiles(text: str) -> dict[str, Profile] | None:
    """The profiles rules/compiled.py holds for this text; None where it has none, or
    made from another text or for other fields of Profile."""
    compiled = compiled_module("gpudiag.rules.compiled")  # None: missing or damaged
    entry = getattr(compiled, "PROFILES", None)
    if (
        not isinstance(entry, tuple)
        or len(entry) != 3
        or tuple(entry[0]) != text_fingerprint(text)
        or tuple(entry[1]) != _PROFILE_ATTRS
    ):
        return None
    out = {}
    for values in entry[2]:
        fields = dict(zip(_PROFILE_ATTRS, values, strict=True))
        fields["values"] = dict(fields["values"])
        out[fields["name"]] = Profile(**fields)
    return out


def detect_profile(
    readings: dict[str, Reading], profiles: dict[str, Profile]
) -> tuple[Profile | None, list[str]]:
    """The profile of the node's most common GPU model, and the device ids seen; where
    no GPU's device id was read (an `nvlink -s` paste names the GPUs only in its header
    lines), the model whose product name the GPUs' most common name is."""
    ids = [str(r.value) for key in _device_id_keys(tuple(readings)) if (r := readings[key]).ok]
    if not ids:
        return named_profile(readings, profiles), []
    common = Counter(ids).most_common(1)[0][0]
    for profile in profiles.values():
        if common in profile.device_ids:
            return profile, sorted(set(ids))
    return class_profile(readings, profiles), sorted(set(ids))


@functools.lru_cache(maxsize=16)
def _device_id_keys(keys: tuple[str, ...]) -> tuple[str, ...]:
    """The GPUs' PCI device id keys among these keys: found once per shape of readings
    (every judgment detects the profile again)."""
    return tuple(k for k in keys if k.endswith(".pci.device_id") and catalog.GPU_KEY.match(k))


def named_profile(readings: dict[str, Reading], profiles: dict[str, Profile]) -> Profile | None:
    """The model profile whose `product_names` holds the GPUs' most common product name
    (nvidia-smi's 'NVIDIA A100-SXM4-80GB'), compared without case; None when none does."""
    names = [
        str(r.value).strip().lower()
        for key, r in readings.items()
        if key.endswith(".name") and r.ok and catalog.GPU_KEY.match(key) and key.count(".") == 2
    ]
    if not names:
        return None
    common = Counter(names).most_common(1)[0][0]
    for profile in profiles.values():
        if common in (n.lower() for n in profile.product_names):
            return profile
    return None


def class_profile(readings: dict[str, Reading], profiles: dict[str, Profile]) -> Profile | None:
    """The class profile (GeForce, workstation) of GPU 0's brand, or else of a word of
    its product name; None when none matches."""
    brand, name = readings.get("gpu.0.brand"), readings.get("gpu.0.name")
    for profile in profiles.values():
        if brand is not None and brand.ok and str(brand.value) in profile.brands:
            return profile
    for profile in profiles.values():
        if name is not None and name.ok:
            words = str(name.value).lower().split()
            if any(w.lower() in words for w in profile.name_words):
                return profile
    return None
