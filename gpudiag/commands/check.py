"""`gpudiag check SNAPSHOT`: the findings of a saved snapshot."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpudiag.commands.common import write_prometheus
from gpudiag.output import add_format_options

if TYPE_CHECKING:
    from gpudiag.model import Snapshot


def add_parser(subparsers: Any) -> None:
    """`gpudiag check`."""
    check = subparsers.add_parser("check")
    check.add_argument(
        "snapshot",
        metavar="SNAPSHOT",
        help="a snapshot gpudiag wrote (--export, import -o), TOML or JSON; '-' reads stdin",
    )
    check.add_argument(
        "--rules",
        metavar="DIR",
        action="append",
        type=Path,
        default=argparse.SUPPRESS,
        help="also load the rule files in DIR",
    )
    check.add_argument(
        "--profile",
        metavar="NAME",
        default=argparse.SUPPRESS,
        help="judge against this GPU-model profile",
    )
    add_format_options(check, argparse.SUPPRESS)


def _load(path: str) -> Snapshot:
    """The snapshot; a file that is nvidia-smi output, not a snapshot, is refused saying
    so, with the `import` command that reads it (not 'not valid TOML')."""
    from gpudiag.snapshot import SnapshotError, load

    try:
        return load(path)
    except SnapshotError as exc:
        if path == "-":
            raise
        from gpudiag import inputs
        from gpudiag.importing import detect

        try:
            kind = detect(inputs.read_text(path, "a snapshot"))
        except Exception:  # not nvidia-smi output either (or unreadable): the first error
            raise exc from None
        raise SnapshotError(
            path,
            f"nvidia-smi output ({FORMAT_WORDS.get(kind, kind)}), not a snapshot: "
            f"gpudiag import {path} -o node.toml reads it, then gpudiag check node.toml",
        ) from None


FORMAT_WORDS = {"xml": "-q -x", "q": "-q", "topo": "topo -m", "nvlink": "nvlink -s"}


def run(args: argparse.Namespace) -> int:
    """Judge the snapshot again with the rules; print its findings (or --format)."""
    from gpudiag.model import Severity
    from gpudiag.output import render
    from gpudiag.rulefile import load_rules
    from gpudiag.session import (
        exit_code,
        format_finding,
        format_not_applicable,
        format_summary,
        with_findings,
    )

    rules = load_rules(args.rules, site=True)
    snapshot = with_findings(_load(args.snapshot), rules, args.profile)
    if args.prometheus:
        write_prometheus(snapshot, args.prometheus)
    if args.format is not None:
        sys.stdout.write(render(snapshot, args.format, rules))
        return exit_code(snapshot.findings)
    print(format_summary(snapshot, rules).splitlines()[0])
    for finding in snapshot.findings:
        if finding.severity is not Severity.NOT_APPLICABLE:
            print(format_finding(finding))
    for line in format_not_applicable(snapshot.findings):
        print(line)
    return exit_code(snapshot.findings)
