"""`gpudiag demo [healthy|faulty]`: the TUI on a recorded 8-GPU HGX H100 node, for
anyone without one at hand. The demo files ship inside the package (gpudiag.snapshots,
from snapshots/ in the repository): for each demo an NVML replay (`demo_file`, what
`watch` samples) and a whole-node capture (`demo_capture`: two sockets, NUMA, the GPUs
and their NICs on the PCIe bus, with that replay's NVML), which the TUI opens. This module
is the one place that names them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpudiag.session import LiveNode

DEMOS = ("healthy", "faulty")


def demo_file(name: str) -> Path:
    """The shipped demo file of that name (healthy or faulty)."""
    from importlib import resources  # not loaded for the parser (DEMOS)

    if name not in DEMOS:
        raise ValueError(f"no demo {name!r} (choose {' or '.join(DEMOS)})")
    return Path(str(resources.files("gpudiag.snapshots") / f"demo-hgx-h100-{name}.toml"))


def demo_capture(name: str) -> Path:
    """The shipped whole-node capture of that demo (healthy or faulty)."""
    from importlib import resources

    demo_file(name)  # the same names
    files = resources.files("gpudiag.snapshots")
    return Path(str(files / f"demo-hgx-h100-{name}.capture.json"))


def demo_node(name: str, command_line: tuple[str, ...] = ("gpudiag", "demo")) -> LiveNode:
    """The demo node as the TUI opens it: the whole-node capture, host and GPUs, probed
    by today's probes exactly as `gpudiag --replay` does."""
    from gpudiag import capture
    from gpudiag.probes import default_probes
    from gpudiag.rulefile import load_rules
    from gpudiag.session import LiveNode

    host, nvml, _ = capture.load(demo_capture(name))
    return LiveNode(
        host=host,
        nvml=nvml,
        probes=default_probes(),
        rules=load_rules(),
        command_line=command_line,
    )
