"""The driver's GPU recovery action (issue 40: GPUs to reset after the fabric manager
started): nvml.h's field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION read as gpu.N.recovery_action,
every nvmlDeviceGpuRecoveryAction_t value decoded by name, through the real pynvml over the
C stand-in, and each action judged by its rule (FAB013 reset, FAB014 reboot, FAB015 drain
or recover) with its severity and fix. The GPUs are the demo HGX H100's, each given an
action; the actions are made up as test input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpudiag.hostfs import HostFS
from gpudiag.model import Action, Finding, Severity
from gpudiag.nvml import Nvml, ReplayBackend
from gpudiag.probes import default_probes
from gpudiag.probes.fabric import RECOVERY_ACTIONS, recovery_action
from gpudiag.rulefile import load_rules
from gpudiag.session import LiveNode

import rackscale_nodes as nodes
from conftest import FIXTURES, built_once
from standin import PROBE_SCRIPT, build, environment, flatten, run_python

RULES = load_rules()
RULE_IDS = ("FAB013", "FAB014", "FAB015")


def replay(actions: list[Any]) -> dict[str, Any]:
    """The demo's GPUs 0..n-1, GPU i answering the field with actions[i] (a number, an
    NVML error, or None: not recorded)."""
    devices = []
    for index, action in enumerate(actions):
        gpu = nodes.demo.healthy_gpu(index)
        fields = gpu["nvmlDeviceGetFieldValues"]
        fields.pop("230,0", None)
        if action is not None:
            fields["230,0"] = action
        devices.append(gpu)
    return nodes.demo.replay("recovery actions (made up)", devices)


def test_every_value_of_nvml_h_is_decoded_by_name() -> None:
    assert [recovery_action(v) for v in range(8)] == [
        "none",
        "gpu-reset",
        "node-reboot",
        "drain-p2p",
        "drain-and-reset",
        "recover-imex-domain",
        "bus-reset",
        "system-reboot",
    ]
    assert recovery_action(9) == "action-9" and len(RECOVERY_ACTIONS) == 8


@pytest.fixture(scope="module")
def nvml_standin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder, _ = built_once(
        tmp_path_factory, "nvml-standin-current", lambda f: str(build("current", f))
    )
    return folder


def test_the_actions_through_the_real_pynvml_over_the_c_stand_in(
    nvml_standin: Path, tmp_path: Path
) -> None:
    """GPUs 0-6 answer the field with nvml.h's values 0-6 (an unsigned int, as the stand-in
    checks), GPU 7 NotSupported (a driver older than R570)."""
    flat, log = tmp_path / "recording.flat", tmp_path / "calls.log"
    flat.write_text(flatten(replay([*range(7), {"error": "NotSupported"}])))
    run = run_python(
        PROBE_SCRIPT, environment(nvml_standin, flat, log), str(FIXTURES / "host-basic")
    )
    assert run.returncode == 0, run.stderr[-2000:]
    live = json.loads(run.stdout)
    calls = log.read_text()
    assert "BADPOINTER" not in calls and "UNRECORDED" not in calls and "BADRECORD" not in calls
    for index in range(7):
        assert live[f"gpu.{index}.recovery_action"] == ["ok", RECOVERY_ACTIONS[index], ""]
        assert f"gpu={index} NVML_FI_DEV_GET_GPU_RECOVERY_ACTION -> {index}" in calls
    status, _, reason = live["gpu.7.recovery_action"]
    assert status == "unsupported" and "NotSupported" in reason


def test_a_recording_of_another_type_is_refused_by_the_stand_in(
    nvml_standin: Path, tmp_path: Path
) -> None:
    """nvml.h's field is an unsigned int: a recording typed otherwise is no answer."""
    flat, log = tmp_path / "recording.flat", tmp_path / "calls.log"
    text = flatten(replay([1])).replace("230,0\t0\t1\t1", "230,0\t0\t5\t1")
    assert "230,0\t0\t5\t1" in text
    flat.write_text(text)
    run = run_python(
        PROBE_SCRIPT, environment(nvml_standin, flat, log), str(FIXTURES / "host-basic")
    )
    live = json.loads(run.stdout)
    assert "BADRECORD gpu=0 NVML_FI_DEV_GET_GPU_RECOVERY_ACTION type=5" in log.read_text()
    assert live["gpu.0.recovery_action"][0] == "error"


def _findings(actions: list[Any]) -> dict[tuple[str, str], Finding]:
    snapshot = LiveNode(
        HostFS(FIXTURES / "host-basic"), Nvml(ReplayBackend(replay(actions))),
        default_probes(), RULES,
    ).snapshot()  # fmt: skip
    return {(f.rule_id, f.subject): f for f in snapshot.findings if f.rule_id in RULE_IDS}


def test_each_action_fires_its_rule_with_its_severity_action_and_fix() -> None:
    found = _findings([0, 1, 2, 3, 4, 5, 9, None])
    fired = {
        key: (f.severity, f.action)
        for key, f in found.items()
        if f.severity not in (Severity.NOT_APPLICABLE, Severity.UNKNOWN)
    }
    reset, reboot = (Severity.CRITICAL, Action.RESET), (Severity.CRITICAL, Action.REBOOT)
    drain = (Severity.WARNING, Action.MONITOR)
    assert fired == {
        ("FAB013", "GPU 1"): reset,
        ("FAB014", "GPU 2"): reboot,
        ("FAB015", "GPU 3"): drain,
        ("FAB013", "GPU 4"): reset,
        ("FAB015", "GPU 5"): drain,
        ("FAB015", "GPU 6"): drain,  # a value gpudiag does not know, by number
    }
    assert "nvidia-smi -r -i 1" in found[("FAB013", "GPU 1")].fix
    assert "Stop the GPU's clients" in found[("FAB013", "GPU 1")].fix
    assert "reboot it" in found[("FAB014", "GPU 2")].fix
    assert found[("FAB015", "GPU 6")].message == "GPU 6 recovery action: action-9"
    assert "driver's own verdict" in found[("FAB013", "GPU 1")].why
    # a recording made before gpudiag read the field: said, never judged as healthy
    for rule_id in RULE_IDS:
        missing = found[(rule_id, "GPU 7")]
        assert missing.severity is Severity.NOT_APPLICABLE
        assert "the recording holds no GPU recovery action" in missing.message
