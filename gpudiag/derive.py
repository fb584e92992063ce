"""The derived readings of a snapshot, computed in this one place and stored in it as one
more result (DERIVED), beside the probes': screens and reports only read them.

In order: the GPU-NIC topology (gpudiag/probes/topology.py, from the PCIe and GPU
readings); the GPU profile match (`node.profile`, the profile's name, or why none
matched; `node.profile.device_ids`, the GPUs' PCI device ids); the kernel readings
(gpudiag/kernels/readings.py: each figure, its interval, its share of the profile's peak
and of the median of its peers, verdicts; a Grace CPU's STREAM triad against its CPU
profile's band). A snapshot is re-derived from the readings of
its other results and its kernel results, so a stale derived result (or the `topology`
result older versions stored) is replaced, never kept beside the new one.

This module is the registry of the derivations: like the probe registry it lists
plugins (tests/test_layering.py names it as allowed to import them).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from gpudiag import catalog
from gpudiag.catalog import DERIVED
from gpudiag.kernels.readings import PCIE_LANE_GBS, cpu_band_readings, kernel_readings
from gpudiag.model import KernelResult, ProbeResult, ProbeStatus, Reading, ReadingStatus, Snapshot
from gpudiag.probes.topology import derive as topology_readings
from gpudiag.profiles import Profile, detect_profile, load_profiles
from gpudiag.record import record
from gpudiag.rule_operators import RuleError

# results that held derived readings in older snapshots: replaced when derived again
STALE_RESULTS = frozenset({DERIVED, "topology"})
PROFILE_KEY = "node.profile"
DEVICE_IDS_KEY = "node.profile.device_ids"
# the profile match's readings (gpudiag/catalog.py); the topology's and the kernel
# readings' are declared where they are derived
PROFILE = catalog.config(PROFILE_KEY, help="the GPU model's profile the rules judge against")
DEVICE_IDS = catalog.config(DEVICE_IDS_KEY, help="the GPUs' PCI device ids")
# the PCIe generation a GPU's link runs at under load: an idle GPU's link trains down to
# save power (Gen1 at P8 is normal), so gpu.N.pcie.link_gen judges nothing unless the
# GPU is busy; PCIE013 judges this one
LINK_GEN_LOADED = catalog.volatile(
    "gpu.{gpu}.pcie.link_gen_loaded",
    help="the PCIe generation under load: the link's in P0, or the lowest the kernels' "
    "host-to-device copy needs at the link's width; unsupported (cannot judge) when idle",
)
READINGS = catalog.declare("GPU", PROFILE, DEVICE_IDS, LINK_GEN_LOADED)


@record
class Derivation:
    """The derived result, with the profile the rules judge against and the device ids."""

    result: ProbeResult
    profile: Profile | None
    device_ids: tuple[str, ...]


def source_readings(probes: Iterable[ProbeResult]) -> dict[str, Reading]:
    """The readings the derivations start from: every result's but the derived ones'."""
    return {
        r.key: r for result in probes if result.name not in STALE_RESULTS for r in result.readings
    }


def profile_readings(
    readings: Mapping[str, Reading], profile_name: str | None = None
) -> tuple[list[Reading], Profile | None, list[str]]:
    """The profile match as readings, with the profile and the device ids seen: the one
    named (--profile), else the one the GPUs' most common PCI device id selects, else the
    class profile of GPU 0's brand or name; where no GPU's id was read (an nvlink -s
    paste), the model whose product name the GPUs' most common name is. No reading when
    none matches, no GPU's id was read and none was named. Raises RuleError for a name
    no profile has."""
    profiles = load_profiles()
    profile, device_ids = detect_profile(dict(readings), profiles)
    source = "gpu.*.pci.device_id (else gpu.*.name, gpu.0.brand, gpu.0.name), rules/profiles.toml"
    if profile_name is not None:
        if profile_name not in profiles:
            raise RuleError(
                f"--profile {profile_name}: no such profile (known: {', '.join(profiles)})"
            )
        if profiles[profile_name].cpu_parts:
            raise RuleError(f"--profile {profile_name}: a CPU's profile, not a GPU model's")
        profile, source = profiles[profile_name], "--profile"
    out: list[Reading] = []
    if profile is not None:
        out.append(PROFILE.reading(profile.name, source))
    elif device_ids:
        reason = f"no profile matches PCI device id(s) {', '.join(device_ids)}"
        out.append(PROFILE.failed(ReadingStatus.MISSING, reason, source))
    if device_ids:
        out.append(DEVICE_IDS.reading(list(device_ids), "gpu.*.pci.device_id"))
    return out, profile, device_ids


# node.kernel.gpus_median.METRIC: a GPU kernel figure's median over the node's GPUs (the
# node judged as a node: a baseline's floor on it catches a node slower on every GPU,
# which a floor on each GPU cannot tell from the GPUs' own spread); declared with the
# node's kernel figures (node.kernel.{metric}, kernels/readings.py)
NODE_MEDIAN = "node.kernel.gpus_median."
_GPU_FIGURE = re.compile(r"^gpu\.(\d+)\.kernel\.(.+)$")
_NOT_A_FIGURE = (".ci_low", ".ci_high", ".share_of_median", ".share_of_peak", ".verdict")


def node_medians(readings: Iterable[Reading]) -> list[Reading]:
    """NODE_MEDIAN + metric for each GPU kernel figure (a number with a unit) that two or
    more GPUs measured: the median of their figures (the middle two's mean for an even
    count), in their unit."""
    figures: dict[tuple[str, str], list[float]] = {}
    for r in readings:
        match = _GPU_FIGURE.match(r.key)
        if (
            match is None
            or not r.ok
            or not r.unit
            or isinstance(r.value, bool)
            or not isinstance(r.value, int | float)
            or r.key.endswith(_NOT_A_FIGURE)
        ):
            continue
        figures.setdefault((match.group(2), r.unit), []).append(float(r.value))
    out = []
    if any(len(values) >= 2 for values in figures.values()):
        import statistics  # 5 ms to import: only where there are kernel figures (issue 44)
    for (metric, unit), values in sorted(figures.items()):
        if len(values) < 2:
            continue
        out.append(
            Reading(
                f"{NODE_MEDIAN}{metric}",
                round(statistics.median(values), 9),  # no 50.876999999999995
                unit,
                f"derived:median of {len(values)} GPUs' gpu.N.kernel.{metric}",
            )
        )
    return out


def _ok_value(readings: Mapping[str, Reading], key: str) -> object:
    found = readings.get(key)
    return found.value if found is not None and found.ok else None


def loaded_link_gens(
    readings: Mapping[str, Reading], derived: Mapping[str, Reading]
) -> list[Reading]:
    """gpu.N.pcie.link_gen_loaded for every GPU with a link generation reading (not read
    where it was not, with its status): the link's
    generation where the GPU was in P0 when read; else, where the kernels copied from the
    host to it, the lowest generation whose bandwidth at the link's width carries that
    copy (55 GB/s over x16 needs Gen5: Gen4 x16 is 31.5), unless the GPU's host link is
    NVLink-C2C (gpu.N.c2c.enabled: its copies never crossed the PCIe link); else
    unsupported, saying that an idle GPU's link cannot be judged."""
    out = []
    for gpu in catalog.gpu_indices(readings):
        read = readings.get(f"gpu.{gpu}.pcie.link_gen")
        if read is None:  # a source without it (an import): PCIE013 does not apply, as PCIE001
            continue
        if not read.ok:
            why = f"gpu.{gpu}.pcie.link_gen: {read.reason or read.status.value}"
            out.append(
                LINK_GEN_LOADED.failed(read.status, why, "derived:gpu.N.pcie.link_gen", gpu=gpu)
            )
            continue
        gen = read.value
        pstate = _ok_value(readings, f"gpu.{gpu}.pstate")
        c2c = _ok_value(readings, f"gpu.{gpu}.c2c.enabled") is True
        # a C2C GPU's host copies go over NVLink-C2C: they say nothing of its PCIe link
        copy = None if c2c else _ok_value(derived, f"gpu.{gpu}.kernel.copy.h2d.local")
        width = _ok_value(readings, f"gpu.{gpu}.pcie.link_width")
        if pstate == "P0":
            out.append(LINK_GEN_LOADED.reading(gen, "derived:gpu.N.pcie.link_gen in P0", gpu=gpu))
        elif isinstance(copy, int | float) and isinstance(width, int) and width > 0:
            needed = [g for g, lane in sorted(PCIE_LANE_GBS.items()) if lane * width >= copy]
            proven = needed[0] if needed else max(PCIE_LANE_GBS)
            source = f"derived:the host-to-device copy's {copy:g} GB/s over x{width}"
            out.append(LINK_GEN_LOADED.reading(proven, source, gpu=gpu))
        else:
            idle = f"GPU {gpu} is {pstate}" if pstate else f"GPU {gpu}'s pstate was not read"
            copied = (
                "its host copies go over NVLink-C2C, not this link"
                if c2c
                else "no host-to-device copy ran"
            )
            out.append(
                LINK_GEN_LOADED.failed(
                    ReadingStatus.UNSUPPORTED,
                    f"cannot judge: {idle} and {copied}; an idle link trains down to save power",
                    "derived:gpu.N.pstate",
                    gpu=gpu,
                )
            )
    return out


def derive(
    readings: Mapping[str, Reading],
    kernels: Iterable[KernelResult] = (),
    profile_name: str | None = None,
) -> Derivation:
    """Every derived reading of a node's `readings` (without derived ones) and kernel
    results, as one result named DERIVED."""
    derived = list(topology_readings(dict(readings)).readings)
    profiled, profile, device_ids = profile_readings(readings, profile_name)
    derived += profiled
    peaks = profile.values if profile is not None else None
    known = {**readings, **{r.key: r for r in derived}}
    kernels = tuple(kernels)
    derived += kernel_readings(kernels, known, peaks)
    derived += cpu_band_readings(kernels, known, load_profiles())  # a Grace's STREAM band
    derived += node_medians(derived)
    derived += loaded_link_gens(readings, {r.key: r for r in derived})
    result = ProbeResult(
        name=DERIVED,
        status=ProbeStatus.OK,
        duration_s=0.0,
        readings=tuple(derived),
        title="Derived: GPU-NIC topology, GPU profile, kernel figures",
    )
    return Derivation(result, profile, tuple(device_ids))


def with_derived(
    snapshot: Snapshot, profile_name: str | None = None
) -> tuple[Snapshot, Derivation]:
    """The snapshot with its derived result computed again (replacing any stale one; none
    added when nothing is derived), and the derivation."""
    kept = tuple(p for p in snapshot.probes if p.name not in STALE_RESULTS)
    readings = source_readings(kept) if len(kept) < len(snapshot.probes) else None
    base = snapshot.readings_by_key if readings is None else readings
    derivation = derive(base, snapshot.kernels, profile_name)
    derived = derivation.result.readings
    if not derived:
        return snapshot.with_probes(kept, base), derivation
    # the index of the kept results' readings, then the derived ones': as a snapshot of
    # these results indexes them (tests/test_derive_index.py holds the two alike)
    index = {**base, **{r.key: r for r in derived}}
    return snapshot.with_probes((*kept, derivation.result), index), derivation


def ensure_derived(snapshot: Snapshot) -> Snapshot:
    """The snapshot as it is when it holds a derived result; else with one (a file saved
    by an older version), its findings left as recorded."""
    if any(p.name == DERIVED for p in snapshot.probes):
        return snapshot
    return with_derived(snapshot)[0]


def stored_profile(readings: Mapping[str, Reading]) -> tuple[Profile | None, list[str]]:
    """The profile and device ids a judged snapshot's derived readings name (a plain read:
    profiles.toml is parsed once per process); None for a profile this version lacks."""
    name, ids = readings.get(PROFILE_KEY), readings.get(DEVICE_IDS_KEY)
    profile = load_profiles().get(str(name.value)) if name is not None and name.ok else None
    device_ids = list(ids.value) if ids is not None and isinstance(ids.value, list) else []
    return profile, [str(i) for i in device_ids]
