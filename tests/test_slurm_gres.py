"""Issue 24 point 9, its Slurm half: the GPUs Slurm configures for a node (its GRES in
`scontrol show node`) are what the node should have (node.expected_gpus, judged by
NODE001 and NODE002 like any reading). A node configured with GPUs whose bus lists none
is CRITICAL and drained with gpudiag's reason; the same node configured without GPUs is
a node without GPUs (OK). The real H100 node (../shared/realdata/h100-vm) replayed, with
a stand-in scontrol that logs its calls; the real slurmctld path is tests/test_slurm.py."""

from __future__ import annotations

import copy
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
import slurm_cluster

from gpudiag import cli, inputs
from gpudiag.slurmgres import GresError, expected_gpus, gpu_count

from conftest import realdata_dir, run_cli

# one worker runs both files of real-cluster tests (tests/slurm_cluster.py: fixed ports)
pytestmark = pytest.mark.xdist_group("slurm")


@pytest.mark.parametrize(
    ("gres", "count"),
    [
        ("gpu:8", 8),
        ("gpu:h100:8(S:0-1)", 8),
        ("gpu:a100:4(S:0),gpu:v100:2(S:1)", 6),
        ("gpu:2(S:0,1),mps:200", 2),
        ("nic:1,gpu:tesla:1", 1),
        ("gpu", 1),
        ("gpu:h100", 1),
        ("gpu:1K", 1024),
        ("mps:100", 0),
        ("(null)", 0),
    ],
)
def test_gpus_configured_by_a_gres(gres: str, count: int) -> None:
    assert gpu_count(gres) == count


@pytest.mark.parametrize(
    ("gres", "expect"),
    [
        ("gpu:h100:8:x", "Gres entry 'gpu:h100:8:x' not understood"),
        ("gpu:;rm", "not understood"),
        ("gpu:99999", "configures 99999 GPUs, more than 4096"),
    ],
)
def test_a_gres_that_cannot_be_read(gres: str, expect: str) -> None:
    with pytest.raises(GresError, match=expect):
        gpu_count(gres)


def test_the_reading_names_slurm_as_its_source() -> None:
    line = "NodeName=n1 Arch=x86_64 Gres=gpu:h100:8(S:0-1) GresDrain=N/A GresUsed=gpu:0 State=IDLE"
    result = expected_gpus(line, "n1")
    assert result is not None and result.name == "slurm"
    (reading,) = result.readings
    assert (reading.key, reading.value) == ("node.expected_gpus", 8)
    assert reading.source == "slurm:scontrol show node n1 (Gres=gpu:h100:8(S:0-1))"
    assert expected_gpus("NodeName=n1 State=IDLE", "n1") is None  # nothing said


@pytest.fixture(scope="module")
def recorded() -> dict[str, Any]:
    """The real H100 node's capture (one GPU on its bus, NVML answering)."""
    return json.loads((realdata_dir() / "h100-vm" / "h100-vm.capture.json").read_text())


def _without_gpu(recorded: dict[str, Any]) -> dict[str, Any]:
    """The node with its GPU gone from the bus and NVML finding no driver."""
    data = copy.deepcopy(recorded)
    data["nvml"] = {"init": {"error": "DriverNotLoaded"}, "system": {}, "devices": []}
    data["host"]["listdir"]["/sys/bus/pci/devices"].remove("0000:00:06.0")
    return data


def _health(tmp_path: Path, capsys, data: dict[str, Any], gres: str) -> tuple[int, str, str, str]:
    """`health --for slurm` on the capture, with scontrol answering `gres` (no Gres= field
    where empty); the exit code, stdout, stderr and scontrol's calls."""
    capture = tmp_path / "node.capture.json"
    capture.write_text(json.dumps(data))
    calls = tmp_path / "calls"
    calls.unlink(missing_ok=True)
    field = f" Gres={gres}" if gres else ""
    scontrol = tmp_path / "scontrol"
    scontrol.write_text(
        f'#!/bin/sh\necho "$@" >> {calls}\n'
        f"echo 'NodeName=n1 Arch=x86_64 CPUs=2{field} State=IDLE ThreadsPerCore=1'\n"
    )
    scontrol.chmod(0o755)
    code = cli.main(
        ["--replay", str(capture), "health", "--for", "slurm", "--node", "n1",
         "--scontrol", str(scontrol)]
    )  # fmt: skip
    out, err = capsys.readouterr()
    inputs.set_limit(inputs.DEFAULT_MAX_INPUT)
    return code, out, err, calls.read_text() if calls.exists() else ""


REASON = "gpudiag: NODE001 node: Fewer NVIDIA GPUs on the PCI bus than the node should have"


def test_gpus_configured_and_none_on_the_bus_drains(recorded, tmp_path: Path, capsys) -> None:
    code, out, err, calls = _health(tmp_path, capsys, _without_gpu(recorded), "gpu:h100:1(S:0)")
    assert code == 2, (out, err)
    assert out == f"gpudiag: n1: drained: {REASON} (drain)\n", out
    assert f"update NodeName=n1 State=DRAIN Reason={REASON} (drain)\n" in calls


@pytest.mark.parametrize("gres", ["(null)", "", "mps:100"])
def test_no_gpus_configured_and_none_on_the_bus_is_ok(
    recorded, tmp_path: Path, capsys, gres: str
) -> None:
    code, out, err, calls = _health(tmp_path, capsys, _without_gpu(recorded), gres)
    assert (code, out) == (0, "gpudiag: n1: nothing to drain for (IDLE)\n"), err
    assert "update" not in calls


def test_the_gpus_configured_are_there(recorded, tmp_path: Path, capsys) -> None:
    code, out, err, calls = _health(tmp_path, capsys, recorded, "gpu:1")
    assert (code, out) == (0, "gpudiag: n1: nothing to drain for (IDLE)\n"), err
    code, out, err, calls = _health(tmp_path, capsys, recorded, "gpu:h100:2(S:0-1)")
    assert code == 2 and out == f"gpudiag: n1: drained: {REASON} (drain) +1 more\n", out
    assert "State=DRAIN" in calls


def test_a_gres_scontrol_shows_that_cannot_be_read(recorded, tmp_path: Path, capsys) -> None:
    """One line naming the call, exit 3, nothing drained (as every scontrol failure)."""
    code, out, err, calls = _health(tmp_path, capsys, recorded, "gpu:h100:8:x")
    assert (code, out) == (3, ""), out
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "scontrol show node n1: Gres entry 'gpu:h100:8:x' not understood" in err, err
    assert "update" not in calls


@pytest.mark.timeout(120)
def test_a_real_slurmctld_node_configured_with_a_gpu_it_lost(recorded, tmp_path: Path) -> None:
    """Real slurmctld, slurmd and munged (tests/slurm_cluster.py), the node configured
    with Gres=gpu:1: the health check, run as slurmd runs it, reads the GPU from the real
    `scontrol show node` and drains the node with gpudiag's reason while the bus lists
    none; with the GPU back it resumes the node it drained."""
    if reason := slurm_cluster.missing():
        pytest.skip(reason)
    gone = tmp_path / "gone.capture.json"
    gone.write_text(json.dumps(_without_gpu(recorded)))
    back = realdata_dir() / "h100-vm" / "h100-vm.capture.json"
    folder = Path(tempfile.mkdtemp(prefix="gpudiag-gres-", dir="/tmp"))
    try:
        with slurm_cluster.cluster(folder, gpus=1) as cluster:
            args = ["health", "--for", "slurm", "--slurm-conf", str(cluster.conf)]
            args += ["--node", cluster.node]
            result = run_cli("--replay", str(gone), *args, timeout=60)
            assert result.returncode == 2, result.stdout + result.stderr
            assert result.stdout == f"gpudiag: {cluster.node}: drained: {REASON} (drain)\n"
            assert cluster.wait_state("drained") == ("drained", f"{REASON} (drain)")
            result = run_cli("--replay", str(back), *args, timeout=60)
            assert result.returncode == 0, result.stdout + result.stderr
            assert "healthy again; resumed" in result.stdout, result.stdout
            cluster.wait_state("idle")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
