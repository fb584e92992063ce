"""Shared test helpers: fixture paths, the shared real-world data, and the CLI runner."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from gpudiag.derive import derive
from gpudiag.hostfs import HostFS
from gpudiag.model import ProbeStatus, Reading
from gpudiag.nvml import Nvml, ReplayBackend
from gpudiag.probe import ProbeContext
from gpudiag.probes import default_probes
from gpudiag.session import probe_node

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).parent.parent
# Site rules for a replayed GPU node probed on a fixture tree without its PCIe devices: the
# bus-count rules (GPU002 fewer GPUs in NVML than on the bus, GPU031 more) would compare
# the replay's eight GPUs with the tree's none.
NO_BUS_RULES = (
    '[[override]]\nid = "GPU002"\ndisabled = true\n[[override]]\nid = "GPU031"\ndisabled = true\n'
)
REALDATA = Path(os.environ.get("GPUDIAG_REALDATA", REPO.parent / "shared" / "realdata"))


@pytest.fixture
def cuda():
    """The device boundary replaced by the CUDA fake (tests/fakecuda.py), two GPUs."""
    from gpudiag.kernels import device

    from fakecuda import FakeCuda

    fake = FakeCuda(2)
    previous = device.use(fake)
    yield fake
    device.use(previous)


def realdata_dir() -> Path:
    """../shared/realdata, or skip the test with the reason."""
    if not REALDATA.is_dir():
        pytest.skip(f"shared real-world data not found at {REALDATA} (set GPUDIAG_REALDATA)")
    return REALDATA


@pytest.fixture(scope="session")
def realdata_trees(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every captured host tree in realdata/sysfs-procfs, unpacked, by name -> root."""
    base = realdata_dir() / "sysfs-procfs"
    dest = tmp_path_factory.mktemp("realdata-trees")
    roots: dict[str, Path] = {}
    for archive in sorted((base / "raw").glob("*.tar.bz2")):
        name = archive.name.removesuffix(".tar.bz2")
        with tarfile.open(archive, "r:bz2") as tar:
            # trusted archives from shared/realdata; "tar" keeps their relative symlinks
            tar.extractall(dest / name, filter="tar")
        (inner,) = [p for p in (dest / name).iterdir() if p.is_dir()]
        roots[name] = inner
    for archive in sorted((base / "raw").glob("*.ttar")):
        name = archive.name.removesuffix(".ttar")
        subprocess.run(
            [sys.executable, str(base / "unttar.py"), str(archive), str(dest / name)],
            check=True,
            capture_output=True,
        )
        fixtures = dest / name / "fixtures"
        roots[name] = fixtures if fixtures.is_dir() else dest / name
    proc_only = dest / "node_exporter_proc"
    shutil.copytree(base / "node_exporter_proc", proc_only / "proc")
    roots["node_exporter_proc"] = proc_only
    return roots


def run_cli(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run `python -m gpudiag ARGS` in a subprocess, as a user would."""
    full_env = {**os.environ, "NO_COLOR": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "gpudiag", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=full_env,
        timeout=timeout,
        check=False,
    )


def probe_readings(
    root: Path, replay: str = "replay-no-driver.toml", is_root_user: bool | None = True
) -> dict[str, Reading]:
    """Every reading of the default probes on a host tree, by key, with those derived from
    them (the GPU-NIC topology, the profile match) as a judged snapshot holds them. Every
    probe must end ok, but for those that need NVML where the replay has none."""
    context = ProbeContext(
        host=HostFS(root, is_root_user=is_root_user),
        nvml=Nvml(ReplayBackend.from_file(FIXTURES / replay)),
    )
    results = probe_node(default_probes(), context)
    for r in results:
        skipped_for_nvml = r.status is ProbeStatus.SKIPPED and r.error.startswith("needs NVML")
        assert r.status is ProbeStatus.OK or skipped_for_nvml, (r.name, r.error)
    readings = {reading.key: reading for r in results for reading in r.readings}
    return readings | {r.key: r for r in derive(readings).result.readings}


def ok_values(readings: dict[str, Reading]) -> dict[str, object]:
    """The values of the readings that were taken."""
    return {key: r.value for key, r in readings.items() if r.ok}
