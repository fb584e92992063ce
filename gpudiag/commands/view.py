"""`gpudiag view SNAPSHOT`: a saved snapshot in the TUI (read-only)."""

from __future__ import annotations

import argparse
from typing import Any

from gpudiag.commands.common import UsageError, load_snapshot, tui


def add_parser(subparsers: Any) -> None:
    """`gpudiag view`."""
    view = subparsers.add_parser("view")
    view.add_argument("snapshot", metavar="SNAPSHOT", help="a snapshot file, TOML or JSON")


def run(args: argparse.Namespace) -> int:
    """Open the snapshot in the TUI; its exit code."""
    if args.snapshot == "-":
        raise UsageError("view reads the keyboard on standard input: name a snapshot file")
    from gpudiag.derive import ensure_derived
    from gpudiag.rulefile import load_rules

    snapshot = ensure_derived(load_snapshot(args.snapshot))
    # the rules `check` judges with: the overview counts what checked as check does
    return tui(snapshot, load_rules(args.rules, site=True))
