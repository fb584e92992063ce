"""`gpudiag` with no subcommand: the TUI on this node, or with --export a headless
snapshot. Its options are the global ones (gpudiag/cli.py): it adds no parser."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from gpudiag.commands.common import (
    PendingNode,
    check_node_options,
    check_node_paths,
    is_this_machine,
    live_node,
    need_terminal,
    redacted,
    tui,
    write_and_report,
)

if TYPE_CHECKING:
    from gpudiag.session import LiveNode


def run(args: argparse.Namespace) -> int:
    """Probe this node: the TUI, or the --export snapshot (with --kernels' results). The
    TUI opens the node after its first screen (PendingNode), the options checked first."""
    check_node_options(args)
    if not args.export:
        need_terminal()  # before probing the node
        check_node_paths(args)
        pending = PendingNode(lambda: live_node(args), is_this_machine(args))
        try:
            return tui(pending)
        finally:
            pending.close()
    node = live_node(args)
    try:
        return _export(node, args)
    finally:
        node.nvml.close()


def _export(node: LiveNode, args: argparse.Namespace) -> int:
    from dataclasses import replace

    from gpudiag.kernels.plans import PLANS
    from gpudiag.telemetry.readings import ExportWindow

    window = ExportWindow(node.nvml)  # the GPUs' counters over the probing, for the ticket
    snapshot = window.add_to(node.snapshot())
    if args.kernels:
        from gpudiag.session import with_kernel_results

        plan = replace(PLANS[args.kernels], until_confident=args.until_confident)
        print(f"gpudiag: running kernels ({args.kernels}) ...", file=sys.stderr)
        from gpudiag.kernels.runner import PlanRun
        from gpudiag.run_report import print_results, run_with_progress

        run = PlanRun(plan, node.host, nvml=node.nvml)
        # progress per kernel as `gpudiag run` shows it, then the results table, on
        # stderr (stdout may be the snapshot: --export -)
        results, interrupted, others = run_with_progress(run, strict=False)
        print_results(run, results, others, sys.stderr)
        if interrupted:  # the results so far are shown; nothing is written
            raise KeyboardInterrupt
        snapshot = with_kernel_results(snapshot, results, node.rules, node.profile_name)
    snapshot = redacted(snapshot, args)
    return write_and_report(snapshot, args.export, "--export", args, node.rules)
