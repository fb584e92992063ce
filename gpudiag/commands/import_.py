"""`gpudiag import FILE... -o SNAPSHOT`: nvidia-smi outputs turned into a snapshot."""

from __future__ import annotations

import argparse
from typing import Any

from gpudiag.commands.common import UsageError, redacted, write_and_report


def add_parser(subparsers: Any) -> None:
    """`gpudiag import`."""
    imports = subparsers.add_parser("import")
    imports.add_argument(
        "files",
        metavar="FILE",
        nargs="+",
        help="an nvidia-smi output; '-' reads standard input; gzip data (an "
        "nvidia-bug-report.log.gz) is unpacked",
    )
    imports.add_argument(
        "-o",
        "--output",
        metavar="SNAPSHOT",
        required=True,
        help="the snapshot to write (TOML; JSON if it ends in .json; '-' stdout)",
    )


def run(args: argparse.Namespace) -> int:
    """Import the files, judge the snapshot, write it; exit code by findings."""
    from gpudiag.importing import ImportError_, import_files
    from gpudiag.rulefile import load_rules
    from gpudiag.session import with_findings

    try:
        snapshot = import_files(args.files)
    except ImportError_ as exc:
        raise UsageError(str(exc)) from None
    rules = load_rules(args.rules, site=True)
    snapshot = with_findings(snapshot, rules, args.profile)
    return write_and_report(redacted(snapshot, args), args.output, "-o", args, rules)
