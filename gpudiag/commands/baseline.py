"""`gpudiag baseline PATH... -o FILE.toml`: a site rules file from a fleet known to be good.

    gpudiag baseline PATH... -o FILE.toml [--quantile Q] [--margin M]

Exits 0, or 3 when nothing could be read or the file cannot be written.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from gpudiag import inputs
from gpudiag.commands.fleet import fail, load_paths, target_problem_of


def add_parser(subparsers: Any) -> None:
    """`gpudiag baseline`."""
    baseline = subparsers.add_parser("baseline")
    baseline.add_argument("paths", metavar="PATH", nargs="+", help="snapshot files or folders")
    baseline.add_argument(
        "-o", "--output", metavar="FILE.toml", required=True, help="the rules file to write"
    )
    baseline.add_argument(
        "--quantile",
        type=inputs.number_option(0, 0.5),
        default=0.01,
        metavar="Q",
        help="a metric's lower bound is this quantile of the fleet's figures (default 0.01)",
    )
    baseline.add_argument(
        "--margin",
        type=inputs.number_option(0, 1),
        default=0.05,
        metavar="M",
        help="and this fraction below it (default 0.05)",
    )


def run(args: argparse.Namespace) -> int:
    """`gpudiag baseline`: write the site rules file; its exit code."""
    if not 0 <= args.quantile < 0.5:
        return fail("--quantile must be at least 0 and below 0.5")
    if not 0 <= args.margin < 1:
        return fail("--margin must be at least 0 and below 1")
    if problem := target_problem_of(args.output, ".toml"):
        return fail(f"-o {args.output}: {problem}")
    loaded = load_paths(args.paths, None)
    if not loaded.runs:
        return fail("no snapshot could be read")
    from gpudiag.fleet.baseline import baseline_rules, write_rules

    text, count = baseline_rules(loaded, args.quantile, args.margin)
    try:
        write_rules(text, Path(args.output))
    except OSError as exc:
        return fail(f"-o {args.output}: cannot write: {exc.strerror or exc}")
    print(f"wrote {args.output}: {count} rules from {len({r.host for r in loaded.runs})} nodes")
    return 0
