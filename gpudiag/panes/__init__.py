"""The TUI's panes, one screen each, one module each: each declares its key, its own
bindings and `update_from(view)`, which draws it from a snapshot only."""

from __future__ import annotations

from gpudiag.panes.base import Pane, SnapshotView
from gpudiag.panes.findings import FindingsPane
from gpudiag.panes.gpus import GpusPane
from gpudiag.panes.host import HostPane
from gpudiag.panes.kernels import KernelsPane
from gpudiag.panes.overview import OverviewPane
from gpudiag.panes.probes import ProbesPane
from gpudiag.panes.readings import ReadingsPane
from gpudiag.panes.topology import TopologyPane
from gpudiag.panes.watch import WatchPane

# In tab order (keys 1-9).
PANES: tuple[type[Pane], ...] = (
    OverviewPane,
    FindingsPane,
    GpusPane,
    TopologyPane,
    HostPane,
    KernelsPane,
    ReadingsPane,
    ProbesPane,
    WatchPane,
)

__all__ = [
    "PANES",
    "FindingsPane",
    "GpusPane",
    "HostPane",
    "KernelsPane",
    "OverviewPane",
    "Pane",
    "ProbesPane",
    "ReadingsPane",
    "SnapshotView",
    "TopologyPane",
    "WatchPane",
]
