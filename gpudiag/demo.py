"""`gpudiag demo [healthy|faulty]`: the TUI on a recorded 8-GPU HGX H100 node, for
anyone without one at hand. The demo files ship inside the package (gpudiag.snapshots,
from snapshots/ in the repository); `demo_file` is the one place that names them.
"""

from __future__ import annotations

import tempfile
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpudiag.session import LiveNode

DEMOS = ("healthy", "faulty")


def demo_file(name: str) -> Path:
    """The shipped demo file of that name (healthy or faulty)."""
    if name not in DEMOS:
        raise ValueError(f"no demo {name!r} (choose {' or '.join(DEMOS)})")
    return Path(str(resources.files("gpudiag.snapshots") / f"demo-hgx-h100-{name}.toml"))


def demo_host_root() -> Path:
    """The host the demo GPUs are shown in: an empty tree (the demo files record the GPUs
    only, so host readings show as not read rather than as this machine's)."""
    return Path(tempfile.mkdtemp(prefix="gpudiag-demo-"))


def demo_node(name: str, command_line: tuple[str, ...] = ("gpudiag", "demo")) -> LiveNode:
    """The demo node as the TUI opens it: the demo file's GPUs, an empty host tree."""
    from gpudiag.hostfs import HostFS
    from gpudiag.nvml import open_nvml
    from gpudiag.probes import default_probes
    from gpudiag.ruleengine import load_rules
    from gpudiag.session import LiveNode

    return LiveNode(
        host=HostFS(demo_host_root()),
        nvml=open_nvml(demo_file(name)),
        probes=default_probes(),
        rules=load_rules(),
        command_line=command_line,
    )
