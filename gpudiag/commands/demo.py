"""`gpudiag demo [NAME]`: the TUI on a recorded 8-GPU HGX H100 node (the recordings:
gpudiag/demo.py); `gpudiag --export FILE demo [NAME]`: its snapshot, headless (a pipe, CI,
an offline install checked without a terminal)."""

from __future__ import annotations

import argparse
from typing import Any

from gpudiag.commands.common import (
    PendingNode,
    UsageError,
    check_node_options,
    tui,
    write_and_report,
)
from gpudiag.demo import DEMOS


def add_parser(subparsers: Any) -> None:
    """`gpudiag demo`."""
    demo = subparsers.add_parser("demo")
    demo.add_argument(
        "demo_name",
        nargs="?",
        choices=DEMOS,
        default="faulty",
        help="which recording: the node with faults or the healthy one (default: faulty)",
    )


def run(args: argparse.Namespace) -> int:
    """The TUI on the demo node, or with --export its judged snapshot written as the
    default command writes this node's; its exit code (by findings with --export)."""
    from gpudiag.demo import demo_node

    if args.kernels:
        raise UsageError("--kernels measures this machine: it cannot go with demo")
    check_node_options(args)  # --format and --prometheus go with --export
    command_line = ("gpudiag", *args.argv)
    if not args.export:  # the TUI opens the recording after its first screen
        pending = PendingNode(lambda: demo_node(args.demo_name, command_line), False)
        try:
            return tui(pending)
        finally:
            pending.close()
    node = demo_node(args.demo_name, command_line)
    try:
        return write_and_report(node.snapshot(), args.export, "--export", args, node.rules)
    finally:
        node.nvml.close()
