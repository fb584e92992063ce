"""`gpudiag fleet PATH...`: what is odd across many nodes' snapshots, and why.

    gpudiag fleet PATH... [--format text|markdown|json] [--threshold Z] [--slow PCT]
                          [--slower PCT] [--compare KEY=A,B] [--margin PCT]
                          [--parquet FILE] [--dataset DIR]

PATH: snapshot files (TOML or JSON) or folders of them, a dataset --dataset wrote
(fleet/dataset.py), or a FILE.parquet that
`fleet --parquet` wrote, alone or with more snapshots. Unreadable files are named on
stderr and skipped. Exits 0 when nothing needs a person, 1 when something does (whatever
else): a node that differs from alike nodes; 3 when nothing does but some input was bad;
the report's verdict line says both, and names findings on every node of a type (the
type's way at the site: they leave the exit code as it is; `gpudiag check` judges them).
With `gpudiag --rules DIR fleet`, every node is judged again with the shipped rules and
DIR's (fleet/judge.py). Polars is imported only to read or write Parquet. What
`baseline` shares with it (reading the paths, checking the target, failing) is here.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from gpudiag import extras, inputs

EXIT_BAD = 3

# fleet, goodput and baseline load NumPy (this module is imported by each) and do no
# linear algebra: OpenBLAS would start a thread per CPU as NumPy loads, for nothing (50-70
# ms of CPU of 1.8 s per fleet run at 1,000 nodes). One thread, where NumPy is not loaded
# yet and the user has not set it; reading workers inherit it.
if "numpy" not in sys.modules:
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def add_parser(subparsers: Any) -> None:
    """`gpudiag fleet`."""
    fleet = subparsers.add_parser("fleet")
    fleet.add_argument(
        "paths",
        metavar="PATH",
        nargs="+",
        help="snapshot files or folders, a dataset --dataset wrote (a folder or a URL), "
        "or a fleet written by --parquet",
    )
    fleet.add_argument(
        "--format",
        choices=("text", "markdown", "json"),
        default=None,
        help="print a report in this form (default: a screen in a terminal, else text)",
    )
    fleet.add_argument(
        "--threshold",
        type=inputs.number_option(0, 1e6, above=True),
        default=5.0,
        metavar="Z",
        help="robust z (distance from the median in MADs x 1.4826) that makes a value odd",
    )
    fleet.add_argument(
        "--slow",
        type=inputs.number_option(0, 100, above=True),
        default=7.0,
        metavar="PCT",
        help="a node is slow when the median of its GPUs is more than PCT percent below "
        "alike nodes' (default 7)",
    )
    fleet.add_argument(
        "--slower",
        type=_percent(inputs.number_option(0, 100, above=True)),
        default=2.0,
        metavar="PCT",
        help="history: the smallest change reported, in percent (default 2)",
    )
    fleet.add_argument(
        "--compare",
        metavar="KEY=A,B",
        help="A/B verdict per kernel metric between nodes whose configuration reading KEY "
        "is A and those where it is B (different, same, or how many more runs decide): "
        "each node's median of its GPUs, or where KEY is one GPU's (gpu.0.power.limit) "
        "that GPU's figure",
    )
    fleet.add_argument(
        "--margin",
        type=_percent(inputs.number_option(0, 100, above=True)),
        default=1.0,
        metavar="PCT",
        help="--compare says 'same' when the difference lies within +-PCT percent (default 1)",
    )
    fleet.add_argument("--parquet", metavar="FILE", help="also write the fleet table as Parquet")
    fleet.add_argument(
        "--dataset",
        metavar="DIR",
        help="also append the snapshots as rows to a partitioned Parquet dataset, a folder or "
        "a URL such as s3://bucket/fleet (docs/dataset.md)",
    )
    fleet.add_argument(
        "--workers",
        type=inputs.number_option(1, 1024, integer=True),
        default=None,
        metavar="N",
        help="processes reading files",
    )


def _percent(parse: Any) -> Any:
    """A number option that also takes a percent sign: --slower 2%."""

    def number(text: str) -> Any:
        return parse(text.removesuffix("%"))

    return number


def fail(message: str) -> int:
    print(f"gpudiag: {inputs.printable(message)}", file=sys.stderr)  # names are data
    return EXIT_BAD


def extra_problem(
    command: str, paths: list[str], parquet: str | None = None, dataset: str | None = None
) -> str | None:
    """Why COMMAND cannot run here: the fleet's engines, and Polars where Parquet files
    are named (inputs written by --parquet, or --parquet's target), are the `fleet` extra
    (gpudiag.extras). Checked before any gpudiag.fleet module is imported."""
    if problem := extras.missing(f"gpudiag {command}", "msgspec", "ClusterShell"):
        return problem
    if parquet and (problem := extras.missing("--parquet", "polars")):
        return problem
    from gpudiag.fleet.store import is_url  # no import of its own: the extra is not needed

    urls = [p for p in [*paths, dataset or ""] if is_url(p)]
    if urls and (problem := extras.missing(urls[0], "polars", "fsspec")):
        return problem
    named = [p for p in paths if p.lower().endswith(".parquet")]  # fleet/load.py's suffix
    return extras.missing(f"reading {named[0]}", "polars") if named else None


def load_paths(paths: list[str], workers: int | None) -> Any:
    """The fleet PATHs hold, as `fleet`, `goodput` and `baseline` read them: snapshot files
    and folders, Parquet files, datasets (a folder or a URL); each snapshot once."""
    from gpudiag.fleet.load import load_fleet
    from gpudiag.fleet.store import is_url

    # a URL is a dataset's (fleet/store.py); a folder is one if it has dataset.MARKER
    datasets = [p for p in paths if is_url(p) or Path(p, "_gpudiag_dataset").is_file()]
    loaded = load_fleet([p for p in paths if p not in datasets], workers)
    empty: list[str] = []
    if datasets:
        from gpudiag.fleet.dataset_read import read_into

        empty = read_into(loaded, datasets)
    from gpudiag.fleet.records import drop_repeats

    if dropped := drop_repeats(loaded):  # a folder named twice, a dataset beside its files
        print(
            f"gpudiag: {dropped} snapshot{'s' if dropped != 1 else ''} read twice "
            "(the same node, time and file) counted once",
            file=sys.stderr,
        )
    if loaded.runs:  # with nothing read, none_read's one line says why instead
        for problem in loaded.bad:
            print(f"gpudiag: skipped {problem}", file=sys.stderr)
    else:  # and names each folder that held no snapshot, with what it held
        from gpudiag.fleet.load import snapshotless

        loaded.bad.extend(snapshotless(p for p in paths if p not in datasets))
        loaded.bad.extend(empty)
    return loaded


NONE_READ_NAMED = 10  # the problems one line names before it counts the rest


def none_read(bad: list[str]) -> str:
    """Why no snapshot could be read, in one line: each problem (the first ten)."""
    named = "; ".join(bad[:NONE_READ_NAMED])
    more = f"; and {len(bad) - NONE_READ_NAMED} more" if len(bad) > NONE_READ_NAMED else ""
    return "no snapshot could be read" + (f": {named}{more}" if bad else "")


def target_problem_of(target: str, suffix: str) -> str | None:
    """Why a file option's target (--parquet, baseline's -o) cannot be written, or None:
    snapshot.target_problem's reasons without its advice that '-' writes to standard
    output (these options write a file, never standard output)."""
    from gpudiag.snapshot import target_problem

    if not target:
        return target_problem(target, stdout=False)
    path = Path(target)
    if path.exists() and not path.is_file():
        return "not a regular file"
    if not path.name.endswith(suffix):
        return f"the file name must end in {suffix}"
    return target_problem(path, stdout=False)


def run(args: argparse.Namespace) -> int:
    """`gpudiag fleet`: the report, or the fleet screen in a terminal; its exit code."""
    if args.parquet is not None and (problem := target_problem_of(args.parquet, ".parquet")):
        return fail(f"--parquet {args.parquet}: {problem}")
    if problem := extra_problem("fleet", args.paths, args.parquet, getattr(args, "dataset", None)):
        return fail(problem)
    if getattr(args, "dataset", None):
        from gpudiag.fleet.dataset import dataset_problem

        if problem := dataset_problem(args.dataset):
            return fail(f"--dataset {args.dataset}: {problem}")
    compare = None
    if args.compare:
        key, _, values = args.compare.partition("=")
        sides = values.split(",")
        if not key or len(sides) != 2 or not all(sides):
            return fail(f"--compare {args.compare}: expected KEY=A,B")
        if sides[0] == sides[1]:
            return fail(f"--compare {args.compare}: A and B are the same value")
        compare = (key, sides[0], sides[1])
    options = {
        "threshold": args.threshold,
        "slow_pct": args.slow,
        "slower_pct": args.slower,
        "compare": compare,
        "margin": args.margin / 100.0,
    }
    if report := bounded_report(args, options):
        return show(report, args.format)
    loaded = load_paths(args.paths, args.workers)
    if not loaded.runs:
        return fail(none_read(loaded.bad))
    if getattr(args, "rules", None):
        from gpudiag.fleet.judge import judge_again
        from gpudiag.rulefile import RuleError, load_rules

        try:
            rules = load_rules(args.rules, site=True)
        except RuleError as exc:
            return fail(str(exc))
        before = len(loaded.bad)
        for path in judge_again(loaded, rules):
            print(f"gpudiag: {path}: judged by its stored findings (no readings)", file=sys.stderr)
        for problem in loaded.bad[before:]:
            print(f"gpudiag: skipped {problem}", file=sys.stderr)
    from gpudiag.fleet.analysis import analyse

    report = analyse(loaded, **options)
    if args.parquet:
        from gpudiag.fleet.parquet import write_parquet

        try:
            write_parquet(report, args.parquet, loaded)
        except OSError as exc:
            return fail(f"--parquet {args.parquet}: cannot write: {exc.strerror or exc}")
    if getattr(args, "dataset", None):
        from gpudiag.fleet.dataset import append_dataset

        try:
            append_dataset(loaded, args.dataset)
        except OSError as exc:
            return fail(f"--dataset {args.dataset}: cannot write: {exc.strerror or exc}")
    if args.format is None and sys.stdout.isatty() and sys.stdin.isatty():
        from gpudiag.fleet.screen import FleetApp

        app = FleetApp(report, loaded)
        app.run()
        if app.signalled:
            return int(app.return_code or 0)
    else:
        return show(report, args.format)
    return report.exit_code()


def show(report: Any, form: str | None) -> int:
    """The report written to standard output as JSON, markdown or text; its exit code."""
    from gpudiag.fleet.report import report_json, report_text

    if form == "json":
        print(json.dumps(report_json(report), indent=1))
    else:
        from gpudiag.termtext import output_width

        # wrapped at $COLUMNS, or the terminal's; in a pipe without it, lines whole
        sys.stdout.write(report_text(report, form == "markdown", output_width()))
    return int(report.exit_code())


def bounded_report(args: argparse.Namespace, options: dict[str, Any]) -> Any:
    """The report of one dataset alone, read in bounded memory (fleet/dataset_scan.py),
    where nothing else needs the whole fleet in memory (--parquet, --dataset, --rules,
    the screen); None otherwise, or where the dataset must be read whole."""
    from gpudiag.fleet.store import is_url

    if len(args.paths) != 1 or args.parquet or getattr(args, "dataset", None):
        return None
    if getattr(args, "rules", None) or (
        args.format is None and sys.stdout.isatty() and sys.stdin.isatty()
    ):
        return None
    path = args.paths[0]
    if not (is_url(path) or Path(path, "_gpudiag_dataset").is_file()):
        return None
    from gpudiag.fleet.dataset_scan import dataset_report

    return dataset_report(path, **options)
