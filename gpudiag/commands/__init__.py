"""gpudiag's subcommands: one module each, with add_parser(subparsers) and run(args) -> int
(its line in `gpudiag --help` is COMMANDS', below). A module imports at load only
what building its parser needs: its work is imported inside run."""

from __future__ import annotations

from importlib import import_module
from types import ModuleType

# The subcommands, in --help's order: name -> (the module of gpudiag/commands/ that adds
# its parser and runs it, its line in --help).
COMMANDS: dict[str, tuple[str, str]] = {
    "check": ("check", "evaluate the rules on a saved snapshot"),
    "diff": ("diff", "compare two snapshots: what differs, and why"),
    "run": ("run", "run measurement kernels and print the results"),
    "rules": ("rules", "list, explain and lint rules; list profiles"),
    "watch": ("watch", "sample every GPU at an interval: one row per GPU per sample"),
    "demo": ("demo", "the TUI on a recorded 8-GPU HGX H100 node (healthy or faulty)"),
    "capture": (
        "capture",
        "record this node (every NVML call, host file and command output the probes"
        " use) into one file that --replay probes later",
    ),
    "view": ("view", "open a saved snapshot in the TUI (read-only)"),
    "import": (
        "import_",
        "turn nvidia-smi outputs (-q -x XML, -q text, a bug report, topo -m, nvlink -s) "
        "into a snapshot",
    ),
    "health": ("health", "the quick, safe check for Nagios, NPD, Slurm or a pipeline"),
    "fleet": (
        "fleet",
        "what is odd across many nodes' snapshots, and why the slow ones are slow",
    ),
    "baseline": ("baseline", "write a site rules file from a fleet known to be good"),
    "goodput": (
        "goodput",
        "what failures cost a large job: rates from the fleet's history, ETTR, checkpoints",
    ),
    "monitor": ("monitor", "always on: what bounds each GPU, for Prometheus and node_exporter"),
}
# gpudiag.kernels.plans.PLANS' names (test_cli checks they agree): that module is loaded
# only when kernels run
KERNEL_PLANS = ("quick", "full")


def command_module(name: str) -> ModuleType:
    """The module of gpudiag/commands/ that runs command `name`."""
    return import_module(f"gpudiag.commands.{COMMANDS[name][0]}")
