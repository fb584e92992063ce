"""GPU-model profiles: what each model (by PCI device id) or class of GPU (GeForce,
workstation cards) should reach, from rules/profiles.toml; rules compare readings with
them (`min_profile`, ...) and the kernel readings take shares of their peaks."""

from __future__ import annotations

import functools
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpudiag import catalog
from gpudiag.inputs import compiled_module, text_fingerprint
from gpudiag.model import Reading
from gpudiag.rule_operators import RuleError


@dataclass(frozen=True)
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


# what a class of GPU has, true or false (a GeForce card has no ECC memory)
PROFILE_FLAGS = {"ecc", "persistence_mode"}
PROFILE_FIELDS = {
    "memory_gb",
    "nvlink_count",
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
}
# Computed from the fields above, never written in a profiles file; rules read them as
# they read the others. fp64_gemm_tflops: what an FP64 GEMM can reach, the FP64 Tensor
# Core figure where the model has one (cuBLAS's DGEMM runs there: 55.7 TFLOP/s measured on
# an H100, whose vector FP64 is 34 and its tensor cores' 67), else the vector figure.
COMPUTED_FIELDS = {"fp64_gemm_tflops"}
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
            - {"title", "device_ids", "inherits", "brands", "name_words"}
        )
        if unknown:
            raise RuleError(
                f"{origin}: profile {name}: unknown key(s) {', '.join(sorted(unknown))}"
            )
        values: dict[str, Any] = {}
        if "inherits" in table:
            values.update(build(str(table["inherits"]), (*seen, name)).values)
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
        words = {}
        for key in ("brands", "name_words"):
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
        )
        return profiles[name]

    for name in raw:
        build(name)
    return profiles


def load_profiles() -> dict[str, Profile]:
    """The shipped GPU-model profiles (rules/profiles.toml), parsed once per process (every
    judgment needs them: the TUI judges again on each refresh)."""
    return dict(_shipped_profiles())


@functools.cache
def _shipped_profiles() -> dict[str, Profile]:
    """rules/profiles.toml's profiles: from the compiled rules module (rules/compiled.py,
    PROFILES) while the file's text is the one compiled, else parsed from its TOML."""
    text = shipped_profiles_path().read_text(encoding="utf-8")
    compiled = _compiled_profiles(text)
    return compiled if compiled is not None else parse_profiles(text, PROFILES_ORIGIN)


# rules/compiled.py's PROFILES: rules/profiles.toml parsed and checked ahead, beside the
# compiled rules (a TOML parse costs a `gpudiag check` more than judging the snapshot),
# with the fingerprint of the text it was made from; an edited profiles.toml no longer
# matches it and is parsed from its text. tests/test_rules_compiled.py holds the two alike.
PROFILES_ORIGIN = "rules/profiles.toml"
_PROFILE_ATTRS = tuple(Profile.__dataclass_fields__)


def shipped_profiles_path() -> Path:
    """The shipped profiles file (in the `gpudiag.rules` package, on disk)."""
    import gpudiag.rules

    return Path(gpudiag.rules.__file__).parent / "profiles.toml"


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
    """The profile of the node's most common GPU model, and the device ids seen."""
    ids = [str(r.value) for key in _device_id_keys(tuple(readings)) if (r := readings[key]).ok]
    if not ids:
        return None, []
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
