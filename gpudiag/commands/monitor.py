"""`gpudiag monitor`: the always-on sampler of what bounds each GPU, with a Prometheus
endpoint and a node_exporter textfile (gpudiag/telemetry/monitor.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from gpudiag import extras, inputs
from gpudiag.commands.common import UsageError


def add_parser(subparsers: Any) -> None:
    """`gpudiag monitor`."""
    monitor = subparsers.add_parser("monitor")
    monitor.add_argument(
        "--interval",
        type=inputs.number_option(0, 86400, above=True),
        default=1.0,
        metavar="S",
        help="seconds per window (1)",
    )
    monitor.add_argument(
        "--count",
        type=inputs.number_option(1, 10**9, integer=True),
        metavar="N",
        help="windows to take (default: until SIGTERM or Ctrl-C)",
    )
    monitor.add_argument(
        "--listen", metavar="[HOST]:PORT", help="serve Prometheus metrics here (e.g. :9841)"
    )
    monitor.add_argument(
        "--textfile", metavar="FILE", help="write the metrics here after every window (.prom)"
    )
    monitor.add_argument(
        "--snapshot",
        metavar="FILE",
        help="a snapshot of this node with its STREAM, GEMM, copy and all-reduce results: "
        "the ceilings (else the profile's datasheet figures)",
    )
    monitor.add_argument(
        "--ring",
        type=inputs.number_option(1, 10**7, integer=True),
        default=3600,
        metavar="N",
        help="windows kept in memory (3600)",
    )
    monitor.add_argument(
        "--history",
        metavar="DIR",
        help="append each hour's windows to Parquet here (DIR/date=YYYY-MM-DD/HOST-HH-MM-SS"
        ".parquet)",
    )
    monitor.add_argument(
        "--format",
        choices=("text", "jsonl"),
        default="text",
        help="the event lines on standard output: text for people, jsonl for pipelines",
    )


def _listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--listen {text!r}: give [HOST]:PORT, a port from 1 to 65535")
    return host or "0.0.0.0", int(port)  # noqa: S104 (an exporter serves the network)


def _kernels(snapshot: str | None) -> tuple[Any, ...]:
    """The kernel results of the snapshot given (the node's own ceilings), else none."""
    if not snapshot:
        return ()
    from gpudiag.snapshot import SnapshotError, load

    try:
        return load(snapshot).kernels
    except SnapshotError as exc:
        raise UsageError(f"--snapshot: {exc}") from None


def run(args: argparse.Namespace) -> int:
    """Monitor until SIGTERM, Ctrl-C or --count windows; 0 when it ends."""
    from gpudiag.nvml import NvmlError, open_nvml
    from gpudiag.telemetry.explain import node_ceilings
    from gpudiag.telemetry.monitor import Monitor, Stop, serve
    from gpudiag.telemetry.monitor import run as run_monitor

    listen = _listen(args.listen) if args.listen else None
    textfile = Path(args.textfile) if args.textfile else None
    if textfile is not None and not textfile.parent.is_dir():
        raise UsageError(f"--textfile {args.textfile}: no such directory {textfile.parent}")
    if (listen or textfile) and (problem := extras.missing("gpudiag monitor", "prometheus_client")):
        raise UsageError(problem)
    history = None
    if args.history:
        import socket

        # the hours are written as Parquet by a child process, which would fail unseen
        if problem := extras.missing("--history", "polars"):
            raise UsageError(problem)

        from gpudiag.telemetry.history import HourBuffer

        folder = Path(args.history)
        if not folder.is_dir():
            raise UsageError(f"--history {args.history}: no such directory")
        history = HourBuffer(folder, socket.gethostname())
    nvml = open_nvml(args.nvml_replay)
    server = None
    try:
        try:
            gpus = int(nvml.call("nvmlDeviceGetCount"))
        except NvmlError as exc:
            raise UsageError(f"monitor: no GPU can be sampled: {exc.reason}") from None
        ceilings = node_ceilings(nvml, gpus, _kernels(args.snapshot))
        monitor = Monitor(
            nvml,
            gpus,
            ceilings,
            lambda line: print(line, flush=True),
            args.ring,
            fmt=args.format,
            history=history,
        )
        stop = Stop()
        stop.install()
        if listen is not None:
            try:
                server = serve(monitor, *listen)
            except OSError as exc:
                raise UsageError(f"--listen {args.listen}: {exc.strerror or exc}") from None
        print(f"gpudiag monitor: {gpus} GPUs every {args.interval:g} s", file=sys.stderr)
        run_monitor(monitor, args.interval, args.count, stop, textfile)
    except KeyboardInterrupt:
        return 0
    finally:
        if server is not None:
            server.shutdown()
        nvml.close()
    return 0
