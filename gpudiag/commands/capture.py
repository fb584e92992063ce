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


class CounterWindows:
    """The GPUs' performance counters in a capture (gpudiag/telemetry/sampler.py): one
    sampler for the whole capture, so that each recording holds the counter window since
    the one before (the first's spans the probing), and `gpudiag --replay CAPTURE watch
    --explain` and the TUI judge them again. The window's clocks, power and temperature
    are the GPU probe's answers in the same recording (`RecordedFirst`): no second live
    call, so a recording holds one answer per call. A node whose NVML cannot count its
    GPUs records none."""

    def __init__(self) -> None:
        self.sampler: Any = None

    def start(self, nvml: Nvml) -> None:
        """The first GPM sample of every GPU, before the probing."""
        from gpudiag.nvml import NvmlError
        from gpudiag.telemetry.sampler import Sampler

        try:
            gpus = int(nvml.call("nvmlDeviceGetCount"))
        except (NvmlError, TypeError, ValueError):
            return
        self.sampler = Sampler(nvml, gpus)
        self.sampler.prime()

    def take(self, nvml: Nvml) -> None:
        """A window of every GPU into the recording `nvml` makes (this recording's)."""
        from gpudiag.capture import RecordingBackend
        from gpudiag.nvml import Nvml

        if self.sampler is not None and isinstance(nvml.backend, RecordingBackend):
            self.sampler.nvml = Nvml(RecordedFirst(nvml.backend))
            self.sampler.sample()


class RecordedFirst:
    """An NVML backend over a recording in progress: a call the recording already holds
    is answered from it, any other is made live and recorded; the GPM window always live
    (its first sample may be in the recording: the window is since then)."""

    def __init__(self, recorder: Any) -> None:
        from gpudiag.capture import replay_data
        from gpudiag.nvml import ReplayBackend

        self.recorder = recorder
        self.description = recorder.description
        self.recorded = ReplayBackend(replay_data(recorder.replay, "recording"), "recording")

    def init(self) -> None:
        return None  # the recording's backend is initialised

    def shutdown(self) -> None:
        return None

    def call(self, function: str, device: int | None, *args: int) -> Any:
        from gpudiag.nvml import GPM_METRICS, NvmlError

        if function == GPM_METRICS:
            return self.recorder.call(function, device, *args)
        try:
            return self.recorded.call(function, device, *args)
        except NvmlError as exc:
            if exc.code not in ("NotRecorded", "InvalidArgument"):
                raise
        return self.recorder.call(function, device, *args)


def _capture(node: Any, args: argparse.Namespace, redact: Any = None) -> int:
    """`gpudiag capture OUT`: probe the node while recording it, then write the capture,
    redacted by `redact` (gpudiag.redact.Redactor) where given."""
    from dataclasses import replace

    from gpudiag.capture import CaptureError, record, save
    from gpudiag.probe import ProbeContext
    from gpudiag.probes import gpu
    from gpudiag.snapshot import target_problem

    target = Path(args.out)
    if problem := target_problem(args.out):
        raise CaptureError(f"capture {args.out}: {problem}")
    if target.exists() and not target.is_file():
        raise CaptureError(f"capture {args.out}: not a regular file")

    counters = CounterWindows()

    def probe(host: HostFS, nvml: Nvml) -> Any:
        counters.start(nvml)  # the first recording's counter window: the probing
        snapshot = replace(node, host=host, nvml=nvml).snapshot()
        counters.take(nvml)
        return snapshot

    def sample(nvml: Nvml) -> None:
        for _ in gpu.collect(ProbeContext(host=node.host, nvml=nvml)):
            pass
        counters.take(nvml)  # each later one's: since the recording before

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
