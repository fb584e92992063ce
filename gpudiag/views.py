"""Tables derived from a snapshot for display: pure functions, shared by the TUI and tests."""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpudiag.model import Snapshot

_GPU_INDEX = re.compile(r"^gpu\.(\d+)\.")
_NIC = re.compile(r"^topo\.gpu\.\d+\.nic\.(.+)$")


@dataclass(frozen=True)
class Matrix:
    """A labelled table: column headers, rows of cells, and a legend."""

    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    legend: tuple[str, ...]


def topology_matrix(snapshot: Snapshot) -> Matrix:
    """The `nvidia-smi topo -m` view: GPU by GPU, then NICs, CPU and NUMA affinity. A pair
    whose reading is missing or failed shows '?'."""
    readings = snapshot.readings_by_key
    gpus = sorted({int(m.group(1)) for key in readings if (m := _GPU_INDEX.match(key))})
    nics = sorted({m.group(1) for key in readings if (m := _NIC.match(key))})

    def cell(key: str) -> str:
        reading = readings.get(key)
        return str(reading.value) if reading is not None and reading.ok else "?"

    headers = (
        "",
        *(f"GPU{g}" for g in gpus),
        *(f"NIC{n}" for n in range(len(nics))),
        "CPUs",
        "NUMA",
    )
    rows = []
    for a in gpus:
        pairs = ["X" if a == b else cell(f"topo.gpu.{a}.{b}") for b in gpus]
        nic_cells = [cell(f"topo.gpu.{a}.nic.{nic}") for nic in nics]
        rows.append(
            (
                f"GPU{a}",
                *pairs,
                *nic_cells,
                cell(f"gpu.{a}.cpu_affinity"),
                cell(f"gpu.{a}.numa_node"),
            )
        )
    legend = [f"NIC{i}: {nic}" for i, nic in enumerate(nics)]
    legend.append(
        "NV# = NVLinks; PIX, PXB, PHB, NODE, SYS = PCIe paths as in nvidia-smi "
        "topo -m; ? = not read (see Readings)"
    )
    return Matrix(tuple(headers), tuple(rows), tuple(legend))
