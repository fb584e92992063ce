"""The node's ceilings, and `gpudiag watch --explain`: a bound-by word per GPU row (a
narrow column) and, under each round, one line per GPU saying what bounds it with its
numbers, and the stragglers; and the TUI's watch screen's lines of the same verdicts, each
resource's share of its ceiling drawn as a bar (`verdict_lines`)."""

from __future__ import annotations

import json
import textwrap
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpudiag.model import Reading
from gpudiag.nvml import Nvml, NvmlError
from gpudiag.telemetry.sampler import Sampler, Window
from gpudiag.telemetry.verdicts import (
    PIPES,
    SHORT,
    Ceilings,
    Straggler,
    Verdict,
    ceilings_for,
    classify,
    stragglers,
)

COLUMN = "bound"
COLUMN_WIDTH = 8  # the longest word: "throttle"


def node_ceilings(nvml: Nvml, gpus: int, kernels: Iterable[Any] = ()) -> list[Ceilings]:
    """Each GPU's ceilings: `kernels` (a snapshot's results) where they hold its STREAM,
    GEMM, copy or the node's all-reduce, else its model's profile (by PCI device id)."""
    from gpudiag.profiles import load_profiles

    kernels = tuple(kernels)
    profiles = load_profiles()
    out = []
    for gpu in range(gpus):
        name, peaks = "", {}
        try:
            pci = nvml.call("nvmlDeviceGetPciInfo", gpu)
            device_id = f"0x{int(pci['pciDeviceId']) >> 16:04x}"
        except (NvmlError, KeyError, TypeError, ValueError):
            device_id = ""
        for profile in profiles.values():
            if device_id in profile.device_ids:
                name, peaks = profile.name, profile.values
                break
        out.append(ceilings_for(gpu, peaks, name, kernels))
    return out


@dataclass(frozen=True)
class Judged:
    """One round: every GPU's window, its verdict, and the stragglers."""

    time: float
    windows: list[Window]
    verdicts: list[Verdict]
    stragglers: list[Straggler]


class Explainer:
    """For `gpudiag watch --explain` and the TUI's watch screen: judges each round of
    watch's samples (its own GPM window of each GPU, taken beside them), sets each
    sample's `bound` value, and gives the lines to print under the round in the output's
    format. The ceilings: the node's own kernel results in `kernels` (a snapshot's),
    else its model's profile."""

    def __init__(self, nvml: Nvml, fmt: str = "table", kernels: Iterable[Any] = ()) -> None:
        self.columns = {COLUMN: COLUMN_WIDTH}  # the bound-by word, beside the GPU number
        self.nvml = nvml
        self.fmt = fmt
        self.kernels = tuple(kernels)
        self._sampler: Sampler | None = None
        self._ceilings: list[Ceilings] = []

    def judge(self, gpus: int, now: float, nvml: Nvml | None = None) -> Judged:
        """One window of every GPU, judged; `nvml`: this round's NVML where each round has
        its own (a capture's recorded samples), the sampler's state kept between them."""
        if nvml is not None:
            self.nvml = nvml
        if self._sampler is None:
            self._sampler = Sampler(self.nvml, gpus)
        if len(self._ceilings) != gpus:
            self._ceilings = node_ceilings(self.nvml, gpus, self.kernels)
        self._sampler.nvml = self.nvml
        windows = self._sampler.sample(now)
        verdicts = [classify(w, self._ceilings[w.gpu]) for w in windows]
        return Judged(now, windows, verdicts, stragglers(windows, verdicts))

    def set_kernels(self, kernels: Iterable[Any]) -> None:
        """New kernel results (the TUI ran kernels): the ceilings are taken again."""
        self.kernels = tuple(kernels)
        self._ceilings = []

    def __call__(self, samples: Sequence[Any], nvml: Nvml | None = None) -> list[str]:
        now = samples[0].time if samples else time.time()
        judged = self.judge(len(samples), now, nvml)
        for sample, verdict in zip(samples, judged.verdicts, strict=False):
            sample.values[COLUMN] = verdict.word
        texts = [v.text for v in judged.verdicts] + [s.text for s in judged.stragglers]
        if self.fmt == "jsonl":
            return [json.dumps({"time": round(now, 3), "explain": text}) for text in texts]
        lead = "# " if self.fmt == "csv" else " " * 10
        return [f"{lead}{text}" for text in texts]


BARS = (*PIPES, "dram", "nvlink", "pcie")  # the order of the watch screen's bars
BAR_WIDTH = 8
BAR_CELL = 6 + 1 + BAR_WIDTH + 1 + 4  # "DRAM   ███████·  91%": three to a line at 80


def bar(share: float, width: int = BAR_WIDTH) -> str:
    """A share of a ceiling as a bar of `width` characters: full at the ceiling (a share
    over it is a full bar; the figure beside it says how far over)."""
    filled = min(width, max(0, round(share * width)))
    return "█" * filled + "·" * (width - filled)


def verdict_lines(verdict: Verdict, width: int, indent: int = 6) -> list[str]:
    """The watch screen's lines of one GPU's verdict: its sentence wrapped to `width`
    (never cut), then each measured resource's share of its ceiling as a bar, as many to
    a line as `width` holds."""
    pad = " " * indent
    room = max(20, width)
    lines = textwrap.wrap(verdict.text, room, initial_indent=pad, subsequent_indent=pad + "  ")
    cells = [
        f"{SHORT.get(name, name):<6} {bar(verdict.shares[name])} {verdict.shares[name]:>4.0%}"
        for name in BARS
        if name in verdict.shares
    ]
    per_line = max(1, (room - indent + 2) // (BAR_CELL + 2))
    for start in range(0, len(cells), per_line):
        lines.append(pad + "  ".join(cells[start : start + per_line]))
    return lines


def recorded(
    readings: Mapping[str, Reading],
    peaks: Mapping[str, Any],
    profile: str,
    kernels: Iterable[Any] = (),
) -> Judged | None:
    """A snapshot's recorded counter windows (gpudiag/telemetry/readings.py) judged,
    against the ceilings it holds (its kernel results, else the profile `peaks`); None
    where it recorded no window."""
    from gpudiag.telemetry.readings import windows_from

    windows = windows_from(readings)
    if not windows:
        return None
    kernels = tuple(kernels)
    verdicts = [classify(w, ceilings_for(w.gpu, peaks, profile, kernels)) for w in windows]
    return Judged(0.0, windows, verdicts, stragglers(windows, verdicts))
