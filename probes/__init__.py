"""The shipped probes (installed as `gpudiag.probes`).

REGISTRY is the explicit list gpudiag runs: adding a probe means writing its module
and adding its PROBE here. The probe modules are imported when REGISTRY (or
`default_probes`) is first asked for, not with the package: `check` of a saved snapshot
imports `gpudiag.probes.topology` (a derivation) and never runs a probe.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's, without importing typing (check loads this package)

if TYPE_CHECKING:
    from gpudiag.probe import Probe


def _registry() -> tuple[Probe, ...]:
    """The registered probes, in the order they run."""
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
        rackscale,
    )

    return (
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
        rackscale.PROBE,
    )


def __getattr__(name: str) -> tuple[Probe, ...]:
    """REGISTRY, built on first use (PEP 562) and kept as a module attribute."""
    if name == "REGISTRY":
        registry = _registry()
        globals()["REGISTRY"] = registry
        return registry
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def default_probes() -> tuple[Probe, ...]:
    """The probes a plain run uses: everything that does not load the GPU."""
    from gpudiag.probe import Cost

    return tuple(p for p in __getattr__("REGISTRY") if p.cost is not Cost.LOADS_GPU)
