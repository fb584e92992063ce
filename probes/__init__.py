"""The shipped probes (installed as `gpudiag.probes`).

REGISTRY is the explicit list gpudiag runs: adding a probe means writing its module
and adding its PROBE here.
"""

from __future__ import annotations

from gpudiag.probe import Cost, Probe
from gpudiag.probes import (
    cpu,
    driver,
    faults,
    gpu,
    host,
    infiniband,
    kernel,
    memory,
    numa,
    nvme,
    pcie,
    platform,
    power,
)

REGISTRY: tuple[Probe, ...] = (
    host.PROBE,
    cpu.PROBE,
    numa.PROBE,
    memory.PROBE,
    pcie.PROBE,
    infiniband.PROBE,
    nvme.PROBE,
    platform.PROBE,
    power.PROBE,
    kernel.PROBE,
    faults.PROBE,
    driver.PROBE,
    gpu.PROBE,
)


def default_probes() -> tuple[Probe, ...]:
    """The probes a plain run uses: everything that does not load the GPU."""
    return tuple(p for p in REGISTRY if p.cost is not Cost.LOADS_GPU)
