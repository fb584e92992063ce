"""A gpu-burn log (https://github.com/wilicc/gpu-burn): its closing verdict per GPU,
'Tested 8 GPUs:' then one '	GPU 3: OK' or '	GPU 3: FAULTY' line each, read into the
reading KRN001 judges (gpu.N.kernel.verified: false for a FAULTY GPU, whose products
differed under load). The `nvidia-smi -L` lines gpu-burn prints first give the names
and UUIDs. A log without its verdict (the burn was stopped before it ended) is refused.
"""

from __future__ import annotations

import re

from gpudiag.importing.common import ImportError_, key_of
from gpudiag.importing.nvlink import parse_nvlink
from gpudiag.model import Reading

SOURCE = "gpu-burn"
_TESTED = re.compile(r"^Tested (\d+) GPUs:\s*$", re.MULTILINE)
_VERDICT = re.compile(r"^\s*GPU (\d+): (OK|FAULTY)\s*$", re.MULTILINE)
# the progress lines gpu-burn prints while it runs ('proc'd: 2261 (7150 Gflop/s) - ...
# errors: 0 - 0 ...'); looked for by their words, not one pattern spanning them (linear)
_PROGRESS = re.compile(r"proc'd: \d+ \(\d+ Gflop/s\)")


def is_gpu_burn(text: str) -> bool:
    """Whether the text is a gpu-burn log: its verdict header or its progress lines."""
    if _TESTED.search(text):
        return True
    return "errors:" in text and _PROGRESS.search(text) is not None


def parse_gpu_burn(text: str) -> list[Reading]:
    """Each GPU's verdict as gpu.N.kernel.verified, with the -L lines' names and UUIDs.
    Raises ImportError_ when the verdict lines are absent or do not match their count."""
    tested = _TESTED.search(text)
    if tested is None:
        raise ImportError_(
            "a gpu-burn log without its verdict ('Tested N GPUs:' and a line per GPU): "
            "the burn did not finish"
        )
    verdicts = _VERDICT.findall(text, tested.end())
    if len(verdicts) != int(tested.group(1)):
        raise ImportError_(
            f"a gpu-burn log that says it tested {tested.group(1)} GPUs but gives "
            f"{len(verdicts)} verdict line(s)"
        )
    head = text[: tested.start()]
    readings = [r for r in parse_nvlink(head) if r.key.endswith((".name", ".uuid"))]
    for gpu, verdict in verdicts:
        readings.append(
            Reading(
                key_of("gpu.{gpu}.kernel.verified", gpu=gpu),
                verdict == "OK",
                "",
                SOURCE,
                reason=f"gpu-burn: GPU {gpu}: {verdict}",
            )
        )
    return readings
