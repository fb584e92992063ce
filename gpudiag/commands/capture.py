"""`gpudiag capture OUT`: record this node into one file that --replay probes later
(the recording and the file's format: gpudiag/capture.py)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpudiag import inputs
from gpudiag.commands.common import check_node_options, live_node, redactor

if TYPE_CHECKING:
    from gpudiag.hostfs import HostFS
    from gpudiag.nvml import Nvml


def add_parser(subparsers: Any) -> None:
    """`gpudiag capture`."""
    parser = subparsers.add_parser("capture")
    parser.add_argument("out", metavar="OUT", help="the capture file to write (JSON)")
    parser.add_argument(
        "--samples",
        type=inputs.number_option(1, 3600, integer=True),
        default=1, metavar="N", help="record the GPUs' NVML N times"
    )
    parser.add_argument(
        "--interval",
        type=inputs.number_option(0, 3600, above=True),
        default=1.0, metavar="S", help="seconds between samples"
    )


def run(args: argparse.Namespace) -> int:
    """Probe the node while recording it, then write the capture (redacted with
    --redact)."""
    check_node_options(args)
    node = live_node(args)
    try:
        return _capture(node, args, redactor(args) if args.redact else None)
    finally:
        node.nvml.close()


def _capture(node: Any, args: argparse.Namespace, redact: Any = None) -> int:
    """`gpudiag capture OUT`: probe the node while recording it, then write the capture,
    redacted by `redact` (gpudiag.redact.Redactor) where given."""
    from dataclasses import replace

    from gpudiag.capture import CaptureError, record, save
    from gpudiag.probe import ProbeContext
    from gpudiag.probes import gpu
    from gpudiag.snapshot import target_problem

    target = Path(args.out)
    if problem := target_problem(target):
        raise CaptureError(f"capture {args.out}: {problem}")
    if target.exists() and not target.is_file():
        raise CaptureError(f"capture {args.out}: not a regular file")

    def probe(host: HostFS, nvml: Nvml) -> Any:
        return replace(node, host=host, nvml=nvml).snapshot()

    def sample(nvml: Nvml) -> None:
        for _ in gpu.collect(ProbeContext(host=node.host, nvml=nvml)):
            pass

    capture, snapshot = record(node.host, node.nvml, probe, args.samples, args.interval, sample)
    if redact is not None:
        capture = redact.capture(capture, snapshot)
    try:
        save(capture, target)
    except OSError as exc:
        raise CaptureError(f"capture {args.out}: cannot write: {exc.strerror or exc}") from None
    host = capture["host"]
    calls = sum(len(d) for d in capture["nvml"]["devices"]) + len(capture["nvml"]["system"])
    print(
        f"wrote {args.out}: {calls} NVML calls of {len(capture['nvml']['devices'])} GPUs, "
        f"{len(host['files'])} host files, {len(host['outputs'])} command outputs, "
        f"{args.samples} sample{'s' if args.samples > 1 else ''}"
    )
    return 0
