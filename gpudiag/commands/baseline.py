"""`gpudiag baseline PATH... -o FILE.toml`: a site rules file from a fleet known to be good.

    gpudiag baseline PATH... -o FILE.toml [--quantile Q] [--margin M] [--by-driver]

One set of rules per node type (GPU model and count, virtual or bare metal; with
--by-driver, the driver too). Prints the groups and how many readings were left out (each
listed, with why, at the end of the file). Exits 0, or 3 when nothing could be read or
the file cannot be written.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from gpudiag import inputs
from gpudiag.commands.fleet import (
    extra_problem,
    fail,
    load_paths,
    none_read,
    target_problem_of,
)


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
    baseline.add_argument(
        "--by-driver",
        action="store_true",
        help="one set of rules per driver as well (a site running one driver per group)",
    )


def run(args: argparse.Namespace) -> int:
    """`gpudiag baseline`: write the site rules file; its exit code."""
    if not 0 <= args.quantile < 0.5:
        return fail("--quantile must be at least 0 and below 0.5")
    if not 0 <= args.margin < 1:
        return fail("--margin must be at least 0 and below 1")
    if problem := target_problem_of(args.output, ".toml"):
        return fail(f"-o {args.output}: {problem}")
    if problem := extra_problem("baseline", args.paths):
        return fail(problem)
    loaded = load_paths(args.paths, None)
    if not loaded.runs:
        return fail(none_read(loaded.bad))
    from gpudiag.fleet.baseline import baseline, write_rules
    from gpudiag.fleet.table import fold

    found = baseline(loaded, args.quantile, args.margin, args.by_driver)
    try:
        write_rules(found.text, Path(args.output))
    except OSError as exc:
        return fail(f"-o {args.output}: cannot write: {exc.strerror or exc}")
    from gpudiag.termtext import output_width, wrap

    width = output_width()
    nodes = len({r.host for r in loaded.runs})
    print("\n".join(wrap(f"wrote {args.output}: {found.count} rules from {nodes} nodes", width)))
    for kind, hosts in found.groups:
        left = sum(1 for label, _, _ in found.left_out if label == kind.label)
        line = (
            f"  {kind.label}: {len(hosts)} nodes ({fold(hosts)}); "
            f"{left} readings left out (listed in the file, with why)"
        )
        print("\n".join(wrap(line, width, 4)))
    return 0
