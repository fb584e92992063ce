"""The GPUs Slurm configures for a node, as a reading the rules judge: `node.expected_gpus`
from the node's GRES in `scontrol show node NAME` (`Gres=gpu:8`, `gpu:h100:8(S:0-1)`,
`gpu:a100:4,gpu:v100:2,nic:1`, `(null)`). The Slurm health check reads it before it
probes and puts it in the snapshot as the result of a pseudo-probe named `slurm`; the
rules that compare it with the GPUs the bus lists and NVML sees (rules/node.toml, NODE001
and NODE002) judge it as they judge any reading, whoever says what the node should have."""

from __future__ import annotations

import re

from gpudiag import catalog
from gpudiag.model import ProbeResult, ProbeStatus

PRODUCER = "slurm"
EXPECTED_GPUS = catalog.config(
    "node.expected_gpus",
    "GPUs",
    help="the NVIDIA GPUs the node should have: the GPUs Slurm configures for it (GRES)",
)
READINGS = catalog.declare("Node", EXPECTED_GPUS)
GRES = re.compile(r"(?:^|\s)Gres=(\S*)")
# one GRES entry: NAME[:TYPE][:COUNT], COUNT with Slurm's K/M/G suffixes
_ENTRY = re.compile(r"([A-Za-z0-9_/-]+)(?::([A-Za-z0-9_.-]+))?(?::([0-9]+[KMG]?))?")
_SUFFIX = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}
MAX_GPUS = 4096  # more GPUs than any node holds: a Gres= that cannot be meant


class GresError(ValueError):
    """A Gres= value that cannot be read; str() says which part."""


# a count of more digits is far past MAX_GPUS: refused before int() reads it (int() of
# 5,000 digits is Python's plain ValueError, past its 4,300-digit limit); a shorter one is
# read, and the total is said against MAX_GPUS
_COUNT_DIGITS = 9


def _count(text: str) -> int:
    """A GRES count (8, 2K); GresError for one of more than _COUNT_DIGITS digits."""
    digits = text.rstrip("KMG").lstrip("0") or "0"
    if len(digits) > _COUNT_DIGITS:
        raise GresError(f"Gres count {text[:12]}... ({len(digits)} digits) is past {MAX_GPUS}")
    return int(digits) * _SUFFIX[text[-1] if text[-1] in "KMG" else ""]


def gpu_count(gres: str) -> int:
    """The GPUs a Gres= value configures (0 for `(null)` or none): every `gpu` entry's
    count, of any type; GresError for an entry that does not read as NAME[:TYPE][:COUNT]."""
    if gres in ("", "(null)"):
        return 0
    bare = re.sub(r"\([^()]*\)", "", gres)  # socket bindings: (S:0-1), (S:0,2)
    total = 0
    for entry in bare.split(","):
        match = _ENTRY.fullmatch(entry)
        if match is None:
            raise GresError(f"Gres entry {entry[:40]!r} not understood")
        name, kind, count = match.groups()
        if name != "gpu":
            continue
        if count is None and kind is not None and re.fullmatch(r"[0-9]+[KMG]?", kind):
            kind, count = None, kind  # gpu:8
        total += _count(count) if count else 1
    if total > MAX_GPUS:
        raise GresError(f"Gres {gres[:40]!r} configures {total} GPUs, more than {MAX_GPUS}")
    return total


def expected_gpus(node_line: str, node: str) -> ProbeResult | None:
    """The `slurm` pseudo-probe's result from `scontrol show node NODE --oneliner`'s
    answer: node.expected_gpus, or None where the answer has no Gres= field (nothing
    said either way). GresError where Gres= cannot be read."""
    found = GRES.search(node_line)
    if found is None:
        return None
    count = gpu_count(found.group(1))
    source = f"slurm:scontrol show node {node} (Gres={found.group(1)[:60]})"
    reading = EXPECTED_GPUS.reading(count, source)
    return ProbeResult(
        name=PRODUCER,
        title="Slurm's configuration of the node",
        status=ProbeStatus.OK,
        duration_s=0.0,
        readings=(reading,),
    )
