"""The `gpudiag` command line.

    gpudiag [--root DIR] [--nvml-replay FILE] [--rules DIR]      the TUI on this node
    gpudiag [...] --export FILE                                  headless snapshot ('-': stdout)
    gpudiag check SNAPSHOT [--rules DIR]                         findings of a saved snapshot
    gpudiag view SNAPSHOT                                        a saved snapshot in the TUI

Exit codes: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN (bad input, usage error, failure).
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from gpudiag import __version__
from gpudiag.hostfs import HostFS
from gpudiag.model import Snapshot
from gpudiag.nvml import ReplayError, open_nvml
from gpudiag.nvsmi import ImportError_, import_files
from gpudiag.probes import default_probes
from gpudiag.ruleengine import RuleError, load_rules
from gpudiag.session import (
    EXIT_UNKNOWN,
    LiveNode,
    exit_code,
    format_finding,
    format_summary,
    with_findings,
)
from gpudiag.snapshot import SnapshotError, dumps, is_json_path, load, save


class UsageError(Exception):
    """Bad arguments; str() is the one-line message."""


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line and exits 3."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see gpudiag --help)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (its --help is the command-line reference)."""
    parser = _Parser(
        prog="gpudiag",
        description="Bring up and diagnose a GPU server node.",
        epilog="Exit codes: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN (bad input or failure).",
    )
    parser.add_argument("--version", action="version", version=f"gpudiag {__version__}")
    parser.add_argument(
        "--root",
        metavar="DIR",
        default="/",
        help="read host files below DIR (a captured tree: DIR/sys, DIR/proc, ...)",
    )
    parser.add_argument(
        "--nvml-replay",
        metavar="FILE",
        help="answer NVML calls from a recorded replay file instead of the driver",
    )
    parser.add_argument(
        "--rules",
        metavar="DIR",
        action="append",
        default=[],
        type=Path,
        help="also load the *.toml rule files in DIR (repeatable)",
    )
    parser.add_argument(
        "--export",
        metavar="FILE",
        help="headless: write a snapshot to FILE (TOML; JSON if it ends in .json;"
        " '-' for stdout) and print a summary",
    )
    parser.add_argument(
        "--profile",
        metavar="NAME",
        help="judge against this GPU-model profile instead of the detected one",
    )
    parser.add_argument(
        "--timeout-scale",
        type=float,
        default=1.0,
        metavar="X",
        help="multiply every probe's timeout by X (slow or loaded nodes)",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    check = commands.add_parser("check", help="evaluate the rules on a saved snapshot")
    check.add_argument("snapshot", metavar="SNAPSHOT")
    view = commands.add_parser("view", help="open a saved snapshot in the TUI (read-only)")
    view.add_argument("snapshot", metavar="SNAPSHOT")
    imports = commands.add_parser(
        "import",
        help="turn nvidia-smi outputs (-q -x XML, -q text, a bug report, topo -m, nvlink -s) "
        "into a snapshot",
    )
    imports.add_argument("files", metavar="FILE", nargs="+")
    imports.add_argument(
        "-o",
        "--output",
        metavar="SNAPSHOT",
        required=True,
        help="the snapshot to write (TOML; JSON if it ends in .json; '-' stdout)",
    )
    return parser


def _live_node(args: argparse.Namespace, argv: Sequence[str]) -> LiveNode:
    root = Path(args.root)
    if not root.is_dir():
        raise UsageError(f"--root {args.root}: no such directory")
    if args.timeout_scale <= 0:
        raise UsageError("--timeout-scale must be positive")
    return LiveNode(
        host=HostFS(root),
        nvml=open_nvml(args.nvml_replay),
        probes=default_probes(),
        rules=load_rules(args.rules, site=True),
        command_line=("gpudiag", *argv),
        timeout_scale=args.timeout_scale,
        profile_name=args.profile,
    )


def _export(node: LiveNode, target: str) -> int:
    return _write_and_report(node.snapshot(), target, "--export")


def _import(args: argparse.Namespace) -> int:
    try:
        snapshot = import_files(args.files)
    except ImportError_ as exc:
        raise UsageError(str(exc)) from None
    snapshot = with_findings(snapshot, load_rules(args.rules, site=True), args.profile)
    return _write_and_report(snapshot, args.output, "-o")


def _write_and_report(snapshot: Snapshot, target: str, option: str) -> int:
    """Write the snapshot (or print it for '-'), then the summary; exit code by findings."""
    if target == "-":
        sys.stdout.write(dumps(snapshot))
        sys.stdout.flush()
        report = sys.stderr
    else:
        path = Path(target)
        if path.is_dir():
            raise UsageError(f"{option} {target}: is a directory")
        if not path.parent.is_dir():
            raise UsageError(f"{option} {target}: directory {path.parent} does not exist")
        try:
            save(snapshot, path)
        except OSError as exc:
            raise UsageError(f"{option} {target}: cannot write: {exc.strerror or exc}") from None
        report = sys.stdout
    print(format_summary(snapshot), file=report)
    if target != "-":
        kind = "JSON" if is_json_path(target) else "TOML"
        print(f"wrote {target} ({kind})", file=report)
    return exit_code(snapshot.findings)


def _check(args: argparse.Namespace) -> int:
    snapshot = with_findings(load(args.snapshot), load_rules(args.rules, site=True), args.profile)
    print(format_summary(snapshot).splitlines()[0])
    for finding in snapshot.findings:
        print(format_finding(finding))
    return exit_code(snapshot.findings)


def _tui(app_source: object) -> int:
    from gpudiag.tui import GpudiagApp

    app = GpudiagApp(app_source)
    app.run()
    return int(app.return_code or 0)


def run(argv: Sequence[str]) -> int:
    """Run the command line; returns the exit code. Raises only for internal errors."""
    args = build_parser().parse_args(list(argv))
    if args.command == "check":
        return _check(args)
    if args.command == "view":
        return _tui(load(args.snapshot))
    if args.command == "import":
        return _import(args)
    node = _live_node(args, argv)
    try:
        if args.export:
            return _export(node, args.export)
        return _tui(node)
    finally:
        node.nvml.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: one-line errors and exit 3 for bad input, never a traceback."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        return run(argv)
    except (UsageError, SnapshotError, ReplayError, RuleError) as exc:
        print(f"gpudiag: {exc}", file=sys.stderr)
        return EXIT_UNKNOWN
    except KeyboardInterrupt:
        print("gpudiag: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # stdout closed early (gpudiag --export - | head): not an error of ours.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_UNKNOWN
    except Exception as exc:
        if os.environ.get("GPUDIAG_DEBUG"):
            traceback.print_exc()
        print(
            f"gpudiag: internal error: {type(exc).__name__}: {exc} "
            "(set GPUDIAG_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return EXIT_UNKNOWN


if __name__ == "__main__":
    sys.exit(main())
