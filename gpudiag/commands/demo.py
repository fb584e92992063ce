"""`gpudiag demo [NAME]`: the TUI on a recorded 8-GPU HGX H100 node (the recordings:
gpudiag/demo.py)."""

from __future__ import annotations

import argparse
from typing import Any

from gpudiag.commands.common import tui
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
    """The TUI on the demo node; its exit code."""
    from gpudiag.demo import demo_node

    node = demo_node(args.demo_name, ("gpudiag", *args.argv))
    try:
        return tui(node)
    finally:
        node.nvml.close()
