"""OS and kernel: command line, clocksource, taint, the modules that matter to GPUs, and
this process's locked-memory limit (pinned host buffers and GPUDirect need it)."""

from __future__ import annotations

import re
from collections.abc import Iterator

from gpudiag import catalog
from gpudiag.model import Reading, ReadingStatus
from gpudiag.probe import Cost, Probe, ProbeContext
from gpudiag.textparse import parse_words

MODULES = (
    "nvidia",
    "nvidia_uvm",
    "nvidia_modeset",
    "nvidia_drm",
    "nvidia_peermem",
    "nv_peer_mem",
    "gdrdrv",
    "nouveau",
    "ib_core",
    "mlx5_core",
)
# Bit -> flag letter and meaning, from the kernel's Documentation/admin-guide/tainted-kernels.
TAINT_FLAGS = (
    ("P", "proprietary module"),
    ("F", "module force-loaded"),
    ("S", "out-of-spec system"),
    ("R", "module force-unloaded"),
    ("M", "machine check"),
    ("B", "bad page"),
    ("U", "user request"),
    ("D", "kernel died (oops)"),
    ("A", "ACPI table overridden"),
    ("W", "warning"),
    ("C", "staging driver"),
    ("I", "firmware bug workaround"),
    ("O", "out-of-tree module"),
    ("E", "unsigned module"),
    ("L", "soft lockup"),
    ("K", "live patched"),
    ("X", "auxiliary"),
    ("T", "built with struct randomization"),
    ("N", "in-kernel test"),
)


def decode_taint(value: int) -> list[str]:
    """Taint bits -> 'P: proprietary module', ... (unknown bits by number)."""
    flags = []
    for bit in range(value.bit_length()):
        if value >> bit & 1:
            if bit < len(TAINT_FLAGS):
                letter, meaning = TAINT_FLAGS[bit]
                flags.append(f"{letter}: {meaning}")
            else:
                flags.append(f"bit {bit}")
    return flags


def parse_loaded_modules(text: str) -> list[str]:
    """/proc/modules -> module names."""
    return [line.split()[0] for line in text.splitlines() if line.strip()]


def parse_memlock(text: str) -> str:
    """/proc/self/limits -> the soft 'Max locked memory' limit: 'unlimited' or 'N KiB'."""
    for line in text.splitlines():
        if line.startswith("Max locked memory"):
            soft = line[len("Max locked memory") :].split()[0]
            return soft if soft == "unlimited" else f"{int(soft) // 1024} KiB"
    raise ValueError("no 'Max locked memory' line")


def collect(context: ProbeContext) -> Iterator[Reading]:
    """Kernel readings."""
    host = context.host
    yield host.reading("kernel.cmdline", "/proc/cmdline")
    clock = "/sys/devices/system/clocksource/clocksource0"
    yield host.reading("kernel.clocksource", f"{clock}/current_clocksource")
    yield host.reading("kernel.clocksources", f"{clock}/available_clocksource", parse_words)
    taint = host.read("/proc/sys/kernel/tainted")
    yield taint.parsed("kernel.taint", lambda t: int(t.strip()))
    yield taint.parsed("kernel.taint_flags", lambda t: decode_taint(int(t.strip())))
    modules = host.read("/proc/modules")
    loaded = parse_loaded_modules(modules.text or "") if modules.ok else []
    if modules.ok:
        yield Reading("kernel.modules", [m for m in MODULES if m in loaded], source=modules.source)
    else:
        yield modules.reading("kernel.modules")
    yield host.reading("kernel.nvidia_module_version", "/sys/module/nvidia/version")
    yield host.reading("kernel.memlock_limit", "/proc/self/limits", parse_memlock)
    device_files = [n for n in host.listdir("/dev") if re.fullmatch(r"nvidia\d+", n)]
    if host.exists("/dev/nvidiactl") or device_files:
        yield Reading(
            "kernel.dev_nvidia_count", len(device_files), unit="GPUs", source="file:/dev/nvidia*"
        )
    else:
        yield Reading.failed(
            "kernel.dev_nvidia_count",
            ReadingStatus.MISSING,
            "no /dev/nvidiactl: the nvidia module has made no device files",
            "file:/dev/nvidia*",
        )


# the readings this probe makes (gpudiag/catalog.py)
READINGS = (
    *catalog.declare(
        "Kernel",
        catalog.config("kernel.clocksource"),
        catalog.config("kernel.clocksources"),
        catalog.config("kernel.cmdline"),
        catalog.config("kernel.dev_nvidia_count", "GPUs"),
        catalog.config("kernel.memlock_limit"),
        catalog.config("kernel.modules"),
        catalog.config("kernel.nvidia_module_version"),
        catalog.config("kernel.taint"),
        catalog.config("kernel.taint_flags"),
    ),
)

PROBE = Probe(
    name="kernel",
    title="Kernel, modules and limits",
    cost=Cost.INSTANT,
    needs=frozenset(),
    collect=collect,
    timeout_s=5.0,
    readings=READINGS,
)
