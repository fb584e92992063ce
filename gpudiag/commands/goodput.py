"""`gpudiag goodput [PATH...]`: what failures cost a large job on this fleet.

    gpudiag goodput [PATH...] [--rate R] [--gpus N] [--gpus-per-node 8] [--restart MIN]
                    [--checkpoint-write S] [--checkpoint-interval MIN|optimal]
                    [--detect S] [--spares K] [--simulate RUNS] [--seed S]
                    [--format text|markdown|json]

PATH: snapshot files or folders, a fleet Parquet file or a dataset (a folder or URL;
`fleet` reads them the same way) holding several snapshots of
each node over time: the failure rates come from what rose between them (fleet/goodput.py).
`--rate` (failures per 1000 node-days) stands in for the fleet, or overrides its rate.
Exit 0 with a report; 3 (one line) on bad input: no rate and no fleet, a fleet with no
time span, an interval shorter than the checkpoint write.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from gpudiag import inputs
from gpudiag.commands import fleet as _fleet  # noqa: F401  OPENBLAS_NUM_THREADS, before NumPy

EXIT_BAD = 3


def _interval(text: str) -> float | None:
    if text == "optimal":
        return None
    return float(inputs.number_option(0, 1e7, above=True)(text))


def _observed(text: str) -> tuple[int, float]:
    """GPUS:HOURS, a job size and the MTTF its jobs saw."""
    gpus, sep, hours = text.partition(":")
    if not sep:
        raise argparse.ArgumentTypeError(f"not GPUS:HOURS: {text[:40]!r}")
    return (
        int(inputs.number_option(1, 1e8, integer=True)(gpus)),
        float(inputs.number_option(0, 1e9, above=True)(hours)),
    )


def add_parser(subparsers: Any) -> None:
    """`gpudiag goodput`."""
    from gpudiag.fleet.goodput import DEFAULT_MAX_GAP_DAYS
    from gpudiag.fleet.goodput_model import (
        DEFAULT_GPUS,
        DEFAULT_GPUS_PER_NODE,
        DEFAULT_JOB_DAYS,
        DEFAULT_REPAIR_H,
        DEFAULT_RESTART_MIN,
        DEFAULT_WRITE_S,
    )

    p = subparsers.add_parser("goodput")
    number = inputs.number_option
    p.add_argument(
        "paths", metavar="PATH", nargs="*", help="snapshots over time (files or folders)"
    )
    p.add_argument(
        "--rate",
        type=number(0, 1e6),
        metavar="R",
        help="failures per 1000 node-days (instead of, or over, the fleet's)",
    )
    p.add_argument(
        "--gpus",
        type=number(1, 1e8, integer=True),
        default=DEFAULT_GPUS,
        metavar="N",
        help="GPUs in the job (default 16384)",
    )
    p.add_argument(
        "--gpus-per-node",
        type=number(1, 1024, integer=True),
        default=DEFAULT_GPUS_PER_NODE,
        metavar="G",
        help="GPUs per node (default 8)",
    )
    p.add_argument(
        "--restart",
        type=number(0, 1e6),
        default=DEFAULT_RESTART_MIN,
        metavar="MIN",
        help="minutes from a failure's detection to training again (default 10)",
    )
    p.add_argument(
        "--checkpoint-write",
        type=number(0, 1e7),
        default=DEFAULT_WRITE_S,
        metavar="S",
        help="seconds a checkpoint write stops training (default 60)",
    )
    p.add_argument(
        "--checkpoint-interval",
        type=_interval,
        default=None,
        metavar="MIN",
        help="minutes of training between checkpoints, or 'optimal' (default)",
    )
    p.add_argument(
        "--detect",
        type=number(0, 1e7),
        default=0.0,
        metavar="S",
        help="seconds before a failure is noticed (default 0)",
    )
    p.add_argument(
        "--spares",
        type=number(0, 1e6, integer=True),
        default=0,
        metavar="K",
        help="hot spare nodes (the simulation; a what-if row shows 4 when 0)",
    )
    p.add_argument(
        "--repair",
        type=number(0, 1e6),
        default=DEFAULT_REPAIR_H,
        metavar="H",
        help="hours before a failed node is a spare again (simulation; default 24)",
    )
    p.add_argument(
        "--simulate",
        type=number(1, 1e6, integer=True),
        default=0,
        metavar="RUNS",
        help="also simulate RUNS jobs (seeded) and compare",
    )
    p.add_argument(
        "--seed",
        type=number(0, 2**32 - 1, integer=True),
        default=0,
        metavar="S",
        help="the simulation's seed (default 0)",
    )
    p.add_argument(
        "--job-days",
        type=number(0, 1e5, above=True),
        default=DEFAULT_JOB_DAYS,
        metavar="D",
        help="days of training a simulated job does (default 30)",
    )
    p.add_argument(
        "--max-gap",
        type=number(0, 1e5, above=True),
        default=DEFAULT_MAX_GAP_DAYS,
        metavar="DAYS",
        help="longest gap between two snapshots of a node that counts as observed",
    )
    p.add_argument(
        "--observed",
        type=_observed,
        action="append",
        default=[],
        metavar="GPUS:HOURS",
        help="the MTTF jobs of this size saw (repeat): the model's MTTF is shown beside it",
    )
    p.add_argument(
        "--format",
        choices=("text", "markdown", "json"),
        default="text",
        help="the report's form (default text)",
    )
    p.add_argument(
        "--workers",
        type=number(1, 1024, integer=True),
        default=None,
        metavar="N",
        help="processes reading files (default: one per CPU)",
    )


def fail(message: str) -> int:
    print(f"gpudiag: goodput: {inputs.printable(message)}", file=sys.stderr)
    return EXIT_BAD


def run(args: argparse.Namespace) -> int:
    """The report; 0, or 3 on bad input."""
    from gpudiag.fleet.goodput import NoTimeSpan, RatesError, fleet_rates, histories
    from gpudiag.fleet.goodput_model import Job, ModelError
    from gpudiag.fleet.goodput_report import Settings, build
    from gpudiag.fleet.goodput_text import render

    if not args.paths and args.rate is None:
        return fail("give snapshots over time (PATH...) or --rate R")
    fleet = None
    if args.paths:
        from gpudiag.commands.fleet import extra_problem, load_paths, none_read

        if problem := extra_problem("goodput", args.paths):  # reading snapshots: fleet's
            return fail(problem)
        # fleet's reader: files, folders, Parquet files, datasets and their URLs; it names
        # what it skipped
        loaded = load_paths(args.paths, args.workers)
        if not loaded.runs:  # one line: why (each file's problem), as `fleet` says it
            return fail(none_read(loaded.bad))
        try:
            fleet = fleet_rates(histories(loaded), args.max_gap)
        except NoTimeSpan as exc:
            if args.rate is None:
                return fail(str(exc))
            # --rate is used instead of the fleet's: the report goes on with it alone
            print(f"gpudiag: goodput: {exc}; --rate {args.rate:g} used", file=sys.stderr)
        except RatesError as exc:
            return fail(str(exc))
    rate = args.rate if args.rate is not None else fleet.total.per_1000  # type: ignore[union-attr]
    write_s = args.checkpoint_write
    interval_h = None if args.checkpoint_interval is None else args.checkpoint_interval / 60.0
    if interval_h is not None and interval_h * 3600.0 < write_s:
        return fail(
            f"--checkpoint-interval {args.checkpoint_interval:g} min is shorter than the "
            f"checkpoint write ({write_s:g} s)"
        )
    try:
        job = Job(
            gpus=args.gpus,
            rate_per_node_day=rate / 1000.0,
            gpus_per_node=args.gpus_per_node,
            restart_s=args.restart * 60.0,
            write_s=write_s,
            detect_s=args.detect,
            spares=args.spares,
        )
        settings = Settings(
            job,
            interval_h,
            args.simulate,
            args.seed,
            args.job_days * 24.0,
            args.repair,
            tuple(args.observed),
        )
        report = build(rate, fleet, settings, given=args.rate is not None)
    except (ModelError, RatesError) as exc:
        return fail(str(exc))
    if args.format == "json":
        print(json.dumps(report, indent=1))
    else:
        from gpudiag.termtext import terminal_columns

        # wrapped at the terminal's width (COLUMNS honoured; 80 where it has none)
        width = terminal_columns()
        sys.stdout.write(render(report, args.format == "markdown", width))
    return 0
