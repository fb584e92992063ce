"""`gpudiag run` while it works: progress on stderr (a bar on a terminal, one line per
step otherwise), partial results on Ctrl-C, the results table (print_results), and words
beside a figure that cannot be trusted (a coefficient of variation over CV_LIMIT, a host
busy with other work)."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Sequence
from typing import TextIO

import psutil

from gpudiag.kernels.runner import PlanRun
from gpudiag.model import KernelResult, ProbeStatus
from gpudiag.views import result_name

CV_LIMIT = 0.10  # the spread above which diff gives no verdict either
BUSY_LIMIT = 25.0  # % of the host's CPUs used by other processes during the run


class Progress:
    """Progress callback for PlanRun: a redrawn bar on a terminal, else one line per step
    and per quarter of it."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.last: tuple[str, int] = ("", -1)
        self.lock = threading.Lock()

    def __call__(self, label: str, fraction: float) -> None:
        with self.lock:
            if self.tty:
                filled = int(fraction * 30)
                line = f"\r[{'#' * filled}{'.' * (30 - filled)}] {fraction:4.0%} {label}"
                self.stream.write(f"{line[:100]:<100}")
            else:
                quarter = int(fraction * 4)
                if (label, quarter) == self.last:
                    return
                self.stream.write(f"gpudiag: {label}: {fraction:.0%}\n")
                self.last = (label, quarter)
            self.stream.flush()

    def done(self) -> None:
        if self.tty:
            self.stream.write("\r" + " " * 100 + "\r")
            self.stream.flush()


class HostLoad:
    """The share of the host's CPUs other processes used between start and `others()`
    (psutil: the whole machine's use less this process's)."""

    def __init__(self) -> None:
        self.me = psutil.Process()
        psutil.cpu_percent(interval=None)
        self.me.cpu_percent(interval=None)

    def others(self) -> float:
        total = psutil.cpu_percent(interval=None)
        ours = self.me.cpu_percent(interval=None) / (os.cpu_count() or 1)
        return max(0.0, total - ours)


def run_with_progress(
    run: PlanRun, stream: TextIO | None = None, strict: bool = True
) -> tuple[list[KernelResult], bool, float | None]:
    """Run the plan in a thread, showing progress; Ctrl-C cancels it at the next chunk and
    returns what was measured. Returns (results, interrupted, other processes' share of
    the host's CPUs during the run in %, None when not measurable). `strict`: as
    PlanRun.run's (False: GPUs that cannot be used are skipped results, not an error)."""
    stream = stream or sys.stderr  # this call's stderr, not the one of the first import
    progress = Progress(stream)
    run.progress = progress
    failure: list[BaseException] = []
    finished = threading.Event()

    def target() -> None:
        try:
            run.run(strict=strict)
        except BaseException as exc:  # re-raised in the caller's thread
            failure.append(exc)
        finally:
            finished.set()

    load = HostLoad()
    worker = threading.Thread(target=target, name="gpudiag-run", daemon=True)
    worker.start()
    interrupted = False
    # An Event, not Thread.join: a Ctrl-C inside join() can leave the thread looking
    # finished while it runs on (CPython issue 90882), and its results would be lost.
    try:
        while not finished.wait(0.2):
            pass
    except KeyboardInterrupt:
        interrupted = True
        run.cancel.set()
        progress.done()
        stream.write("gpudiag: interrupted: stopping at the next chunk (Ctrl-C again quits)\n")
        while not finished.wait(0.2):
            pass
    progress.done()
    if failure:
        raise failure[0]
    return run.results, interrupted, load.others()


TIGHT = 0.03  # an interval of the median within +-3% of it is tight enough to judge


def trust_note(result: KernelResult) -> str:
    """Why a result's median should not be trusted, or what its spread means; '' when
    the trials agree."""
    s = result.stats
    if s is None or s.cv <= CV_LIMIT:
        return ""
    half = (s.ci95_high - s.ci95_low) / 2 / s.median if s.median > 0 else float("inf")
    if half <= TIGHT:
        return (
            f"note: trials vary (cv {s.cv:.0%}), but over {s.count} of them the median is "
            f"known to +-{half:.1%}"
        )
    return (
        f"WARNING: cv {s.cv:.0%} over {CV_LIMIT:.0%}: the spread is too large to trust the "
        "median (an idle machine, more --trials, or --until-confident S)"
    )


def busy_note(others: float | None) -> str:
    """A line when other processes used the host's CPUs during the run, or ''."""
    if others is None or others < BUSY_LIMIT:
        return ""
    return (
        f"WARNING: other processes used {others:.0f}% of the host's CPUs during the run: "
        "figures may be low"
    )


def print_results(
    run: PlanRun, results: Sequence[KernelResult], others: float | None, file: TextIO | None = None
) -> bool:
    """The kernels' results as a table (and the burns' reports) on `file` (stdout);
    whether any failed (not skipped)."""

    def say(line: str) -> None:
        print(line, file=file or sys.stdout)

    for report in run.burns:
        if report.error and not report.faulty:  # the burn could not run: no verdict
            say(f"burn           {report.device:<12} ERROR: {report.error}")
            continue
        verdict = "FAULTY" if report.faulty else "ok"
        say(
            f"burn           {report.device:<12} {verdict}: {report.iterations} "
            f"products in {report.seconds:.1f} s ({report.gflops:.4g} GFLOP/s), "
            f"{report.mismatches} mismatches, {report.nans} NaNs"
            + (f" ({report.kind()})" if report.kind() else "")
            + (
                f", measurement problem: {report.unreproduced} mismatches not reproduced"
                if report.unreproduced
                else ""
            )
            + (f", {report.fault}" if report.fault else "")
            + (f", {len(report.samples)} NVML samples" if report.samples else "")
        )
    shown = [r for r in results if r.kernel != "burn"]
    skipped: dict[tuple[str, str], list[str]] = {}  # one line per device and reason
    for r in shown:
        if r.stats is None and r.status is ProbeStatus.SKIPPED:
            skipped.setdefault((r.device, r.error), []).append(r.kernel)
    width = max(
        [
            22,
            *(len(result_name(r)) + 1 for r in shown),
            *(len(", ".join(k)) + 1 for k in skipped.values()),
        ]
    )
    if shown:
        say(
            f"{'kernel':<{width}} {'device':<12} {'median':>10} {'min':>10} {'max':>10} "
            f"{'cv':>6}  95% CI of the median"
        )
    failed = False
    said: set[tuple[str, str]] = set()
    for r in shown:
        name = result_name(r)
        if r.stats is None and (r.device, r.error) in skipped and r.status is ProbeStatus.SKIPPED:
            kernels = skipped[(r.device, r.error)]
            if len(kernels) > 1:
                if (r.device, r.error) not in said:
                    said.add((r.device, r.error))
                    say(f"{', '.join(kernels):<{width}} {r.device:<12} SKIPPED: {r.error}")
                continue
        if r.stats is None:
            say(f"{name:<{width}} {r.device:<12} {r.status.value.upper()}: {r.error}")
            failed = failed or r.status is not ProbeStatus.SKIPPED
            continue
        s = r.stats
        say(
            f"{name:<{width}} {r.device:<12} {s.median:>10.4g} {s.minimum:>10.4g} "
            f"{s.maximum:>10.4g} {s.cv:>6.1%}  {s.ci95_low:.4g}-{s.ci95_high:.4g} {r.unit}"
        )
        if r.status is ProbeStatus.CANCELLED:
            say(f"{'':<{width}} partial: {r.error}")
        if dict(r.params).get("confident") is False:
            say(f"{'':<{width}} not confident: the --until-confident budget ran out first")
        if r.device.startswith("gpu"):
            from gpudiag.kernels.conditions import ran_under

            if conditions := ran_under(r.params):
                say(f"{'':<{width}} {conditions}")
        if note := trust_note(r):
            say(f"{'':<{width}} {note}")
    if note := busy_note(others):
        say(note)
    return failed
