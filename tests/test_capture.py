"""`gpudiag capture` on the C stand-in libnvidia-ml and a host tree, then `--replay` of the
capture: the same readings and findings. End to end, in subprocesses, as a user runs it.
The stand-in is not a GPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpudiag import tomlcompat

from conftest import REPO, run_cli
from hosttree import build_hgx_tree
from standin import build, environment, flatten

FAULTY = REPO / "snapshots" / "demo-hgx-h100-faulty.toml"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """A host tree, the stand-in, and the environment that makes pynvml load it."""
    base = tmp_path_factory.mktemp("capture")
    library = build("current", base / "lib")
    flat = base / "recording.flat"
    flat.write_text(flatten(tomlcompat.loads(FAULTY.read_text())))
    return {
        "tree": build_hgx_tree(base / "tree"),
        "env": environment(library, flat, base / "calls.log"),
        "log": base / "calls.log",
    }


def readings(snapshot: Path) -> dict[str, object]:
    data = json.loads(snapshot.read_text())
    return {
        r["key"]: (r.get("status", "ok"), r.get("value"))
        for probe in data["probes"]
        for r in probe["readings"]
    }


def findings(snapshot: Path) -> list[tuple[str, str, str]]:
    data = json.loads(snapshot.read_text())
    return [(f["rule_id"], f["subject"], f["message"]) for f in data["findings"]]


def test_a_capture_replays_as_the_node_it_recorded(node, tmp_path: Path) -> None:
    tree, env = str(node["tree"]), node["env"]
    capture = tmp_path / "node.capture.json"
    made = run_cli(
        "--root", tree, "capture", str(capture), "--samples", "2", "--interval", "0.05", env=env
    )
    assert made.returncode == 0, made.stderr
    assert "8 GPUs" in made.stdout and "2 samples" in made.stdout
    live = tmp_path / "live.json"
    assert run_cli("--root", tree, "--export", str(live), env=env).returncode == 2
    again = tmp_path / "replay.json"
    replayed = run_cli("--replay", str(capture), "--export", str(again))  # no stand-in now
    assert replayed.returncode == 2, replayed.stderr
    live_readings, replay_readings = readings(live), readings(again)
    assert len(live_readings) > 1500
    assert live_readings == replay_readings
    assert findings(live) == findings(again)
    assert replay_readings["gpu.4.nvlink.3.speed"] == ("ok", 13.281)
    assert replay_readings["nvml.binding_version"][0] == "ok"
    assert replay_readings["faults.xid.total"] == ("ok", 3)  # the kernel log, recorded
    data = json.loads(capture.read_text())
    assert data["format"] == "gpudiag-capture" and data["version"] == 1
    assert "/proc/cpuinfo" in data["host"]["files"] and "kernel log" in data["host"]["outputs"]
    assert len(data["samples"]) == 1 and len(data["samples"][0]["nvml"]["devices"]) == 8
    assert "BADPOINTER" not in Path(node["log"]).read_text()


def test_a_redacted_capture_keeps_no_names(node, tmp_path: Path) -> None:
    capture = tmp_path / "node.capture.json"
    made = run_cli(
        "--root", str(node["tree"]), "--redact", "capture", str(capture), env=node["env"]
    )
    assert made.returncode == 0, made.stderr
    text = capture.read_text()
    assert "hgx-test-01" not in text and "GPU-0000demo" not in text
    assert "1650000000000" not in text  # the serials
    replayed = run_cli("--replay", str(capture), "--export", str(tmp_path / "r.json"))
    assert replayed.returncode == 2, replayed.stderr
    assert readings(tmp_path / "r.json")["host.hostname"] == ("ok", "host-1")


def test_bad_captures_and_options_are_one_line_errors(tmp_path: Path) -> None:
    not_json = tmp_path / "bad.json"
    not_json.write_text("{ nope")
    snapshot_like = tmp_path / "other.json"
    snapshot_like.write_text('{"format": "something-else"}')
    for path, words in (
        (not_json, "not valid JSON"),
        (snapshot_like, "not a gpudiag capture"),
        (tmp_path / "absent.json", "no such file"),
    ):
        run = run_cli("--replay", str(path), "--export", "-")
        assert run.returncode == 3 and words in run.stderr and len(run.stderr.splitlines()) == 1
    both = run_cli("--replay", str(not_json), "--root", str(tmp_path), "--export", "-")
    assert both.returncode == 3 and "not with --root" in both.stderr
    target = tmp_path / "dir"
    target.mkdir()
    made = run_cli("--nvml-replay", str(FAULTY), "capture", str(target))
    assert made.returncode == 3 and "is a directory" in made.stderr
