"""`gpudiag watch`: sample every GPU at an interval, one row per GPU per sample (the
sampling and its rows: gpudiag/watch.py)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gpudiag import inputs
from gpudiag.commands.common import UsageError
from gpudiag.demo import DEMOS, demo_file


def add_parser(subparsers: Any) -> None:
    """`gpudiag watch`."""
    watch = subparsers.add_parser("watch")
    watch.add_argument(
        "--interval",
        type=inputs.number_option(0, 86400, above=True),
        metavar="S",
        help="seconds (1; with --replay CAPTURE the recorded interval is kept)",
    )
    watch.add_argument(
        "--count",
        type=inputs.number_option(1, 10**9, integer=True),
        metavar="N",
        help="samples to take (default: until Ctrl-C)",
    )
    watch.add_argument(
        "--format",
        choices=("table", "csv", "jsonl"),
        default="table",
        help="table: one line per GPU per sample, as wide as the terminal; csv and jsonl: "
        "every field",
    )
    watch.add_argument("--demo", choices=DEMOS, help="watch a demo node instead of this one")
    watch.add_argument(
        "--explain",
        action="store_true",
        help="a bound-by column, and under each round what bounds each GPU with its numbers",
    )


def _width() -> int | None:
    """The terminal's width when the table goes to one (its rows must not wrap); None in a
    pipe, where every column is written."""
    import shutil

    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None


def run(args: argparse.Namespace) -> int:
    """Watch this node (its device events too), a demo node, an NVML replay or a
    capture's recorded samples; 0 at the end or on Ctrl-C."""
    if args.replay:
        return _replay(args)
    interval = 1.0 if args.interval is None else args.interval
    from gpudiag.nvml import NvmlError, open_nvml
    from gpudiag.watch import watch

    replay = demo_file(args.demo) if args.demo else args.nvml_replay
    nvml = open_nvml(replay)
    events = None
    if replay is None and args.root == "/":  # a live node: its device events too
        from gpudiag.device_events import DeviceWatch, XidFollower

        device_watch, why = DeviceWatch.open()
        xids, why_not_xids = XidFollower.open()
        for reason in (why, why_not_xids):
            if reason:
                print(f"gpudiag: {reason}", file=sys.stderr)
        sources = [source.poll for source in (device_watch, xids) if source is not None]
        events = (lambda: [event for poll in sources for event in poll()]) if sources else None
    explain = None
    if args.explain:
        from gpudiag.telemetry.explain import Explainer

        explain = Explainer(nvml, args.format)
    try:
        watch(
            nvml,
            interval,
            args.count,
            args.format,
            lambda line: print(line, flush=True),
            events=events,
            explain=explain,
            width=_width(),
        )
    except NvmlError as exc:
        raise UsageError(
            f"watch: no GPU can be sampled: {exc.reason}; "
            "`gpudiag watch --demo faulty` shows a recorded node"
        ) from None
    except KeyboardInterrupt:
        return 0
    finally:
        nvml.close()
    return 0


def _print(line: str) -> None:
    print(line, flush=True)


def _replay(args: argparse.Namespace) -> int:
    """`gpudiag --replay CAPTURE watch`: the capture's recorded samples, in order."""
    from gpudiag import capture
    from gpudiag.nvml import NvmlError
    from gpudiag.watch import replay

    if args.demo or args.nvml_replay or args.root != "/":
        raise UsageError("--replay holds the whole node: not with --demo, --root or --nvml-replay")
    if args.interval is not None:
        raise UsageError("--interval: a capture is watched at the interval it was recorded")
    _, nvml, data = capture.load(args.replay)  # checks the file
    nvml.close()
    series = capture.recorded_samples(data)
    if len(series) == 1:
        print(
            f"gpudiag: {args.replay} holds one sample (captured without --samples): shown once",
            file=sys.stderr,
        )
    explain = None
    if args.explain:  # each sample's recorded counter window, judged as watch judges live
        from gpudiag.telemetry.explain import Explainer

        explain = Explainer(series[0][1], args.format)
    try:
        replay(series, args.format, _print, args.count, _width(), explain)
    except NvmlError as exc:
        raise UsageError(f"watch: the capture recorded no GPU to show: {exc.reason}") from None
    finally:
        for _, recorded in series:
            recorded.close()
    return 0
