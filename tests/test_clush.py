"""Fan-out on ClusterShell: `clush -R exec` runs gpudiag once per node name on this
machine (each "node" reads its own replay), and `clubak -c` folds identical outputs."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import NO_BUS_RULES, REPO

TREE = REPO / "tests" / "fixtures" / "host-basic"
FAULTY = REPO / "snapshots" / "demo-hgx-h100-faulty.toml"
HEALTHY = REPO / "snapshots" / "demo-hgx-h100-healthy.toml"
BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    path = BIN / name
    if not path.exists():
        pytest.skip(f"{name} not installed (pip install ClusterShell, in the test extra)")
    return str(path)


def test_clush_fan_out_and_clubak_folds_identical_nodes(tmp_path: Path) -> None:
    clush, clubak = tool("clush"), tool("clubak")
    for node, replay in (("node1", HEALTHY), ("node2", FAULTY), ("node3", HEALTHY)):
        shutil.copyfile(replay, tmp_path / f"{node}.toml")
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "site.toml").write_text(NO_BUS_RULES)
    command = [
        clush, "-S", "-R", "exec", "-w", "node[1-3]",
        str(BIN / "gpudiag"), "--root", str(TREE), "--nvml-replay", f"{tmp_path}/%h.toml",
        "--rules", str(rules), "health", "--for", "npd",
    ]  # fmt: skip
    fan = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert fan.returncode == 2, fan.stderr  # -S: the largest exit code (NPD unknown: 2)
    lines = sorted(fan.stdout.splitlines())
    assert lines[1] == "node2: GPU001 GPU 7: GPU lost (service); +1 more"
    assert lines[0].startswith("node1: gpudiag: 16 checks could not run")
    assert lines[2] == lines[0].replace("node1", "node3")
    folded = subprocess.run(
        [clubak, "-c"], input=fan.stdout, capture_output=True, text=True, check=True
    ).stdout
    headers = [line for line in folded.splitlines() if line.startswith("node")]
    assert sorted(headers) == ["node2", "node[1,3] (2)"]
    nagios = subprocess.run(
        [*command[:-1], "nagios"], capture_output=True, text=True, timeout=60, check=False
    )
    assert nagios.returncode == 3  # node2: CRITICAL (2); node1 and 3: UNKNOWN (3)
    folded = subprocess.run(
        [clubak, "-c"], input=nagios.stdout, capture_output=True, text=True, check=True
    ).stdout
    headers = [line for line in folded.splitlines() if line.startswith("node")]
    assert sorted(headers) == ["node2", "node[1,3] (2)"]
    assert "CRITICAL - 2 critical" in folded
