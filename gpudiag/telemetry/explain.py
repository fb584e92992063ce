"""The node's ceilings, and `gpudiag watch --explain`: a bound-by word per GPU row (a
narrow column) and, under each round, one line per GPU saying what bounds it with its
numbers, and the stragglers."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from typing import Any

from gpudiag.nvml import Nvml, NvmlError
from gpudiag.telemetry.sampler import Sampler
from gpudiag.telemetry.verdicts import Ceilings, ceilings_for, classify, stragglers

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


class Explainer:
    """For `gpudiag watch --explain`: judges each round of watch's samples (its own GPM
    window of each GPU, taken beside them), sets each sample's `bound` value, and gives
    the lines to print under the round in the output's format."""

    def __init__(self, nvml: Nvml, fmt: str) -> None:
        self.columns = {COLUMN: COLUMN_WIDTH}  # the bound-by word, beside the GPU number
        self.nvml = nvml
        self.fmt = fmt
        self._sampler: Sampler | None = None
        self._ceilings: list[Ceilings] = []

    def __call__(self, samples: Sequence[Any]) -> list[str]:
        if self._sampler is None:
            self._sampler = Sampler(self.nvml, len(samples))
            self._ceilings = node_ceilings(self.nvml, len(samples))
        now = samples[0].time if samples else time.time()
        windows = self._sampler.sample(now)
        verdicts = [classify(w, self._ceilings[w.gpu]) for w in windows]
        for sample, verdict in zip(samples, verdicts, strict=False):
            sample.values[COLUMN] = verdict.word
        texts = [v.text for v in verdicts] + [s.text for s in stragglers(windows, verdicts)]
        if self.fmt == "jsonl":
            return [json.dumps({"time": round(now, 3), "explain": text}) for text in texts]
        lead = "# " if self.fmt == "csv" else " " * 10
        return [f"{lead}{text}" for text in texts]
