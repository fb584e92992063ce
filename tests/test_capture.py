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


DEMO_CAPTURE = Path(__file__).parent.parent / "snapshots" / "demo-hgx-h100-healthy.capture.json"


@pytest.mark.parametrize(
    ("kind", "key", "damage", "words"),
    [
        ("files", "/etc/os-release", {"0text": "ID=x"}, "no text"),  # found by the fuzzer
        ("files", "/etc/os-release", {"status": "bogus", "reason": "r"}, "a status and"),
        ("files", "/etc/os-release", {"base64": "@@@"}, "not base64"),
        ("files", "/etc/os-release", ["ID=x"], "not a table"),
        ("listdir", "/sys/bus/pci/devices", "0000:18:00.0", "a list of names"),
        ("exists", "/dev/nvidiactl", "yes", "true or false"),
        ("realpath", "/sys/bus/pci/devices/0000:18:00.0", 5, "a path is expected"),
    ],
)
def test_a_damaged_host_record_is_refused_whole(
    tmp_path: Path, kind: str, key: str, damage: object, words: str
) -> None:
    data = json.loads(DEMO_CAPTURE.read_text())
    data["host"][kind][key] = damage
    damaged = tmp_path / "damaged.json"
    damaged.write_text(json.dumps(data))
    run = run_cli("--replay", str(damaged), "--export", "-")
    assert run.returncode == 3 and len(run.stderr.splitlines()) == 1, run.stderr
    assert f"record of {key!r} is damaged ({words}" in run.stderr


def test_watch_replays_a_captures_samples_in_order(node, tmp_path: Path) -> None:
    """Three samples of a node whose GPU 0 draws more power each time (the stand-in answers
    a call recorded three times with each record in turn): watch shows the three in order,
    at the recorded times, not the first one three times."""
    flat = tmp_path / "rising.flat"
    text = flatten(tomlcompat.loads(FAULTY.read_text()))
    first = "D\t0\tnvmlDeviceGetPowerUsage\t-\t0\t69000\n"
    assert first in text
    flat.write_text(
        text.replace(
            first, first + first.replace("69000", "250000") + first.replace("69000", "400000")
        )
    )
    env = {**node["env"], "GPUDIAG_STANDIN_DATA": str(flat)}
    capture = tmp_path / "series.capture.json"
    made = run_cli(
        "--root",
        str(node["tree"]),
        "capture",
        str(capture),
        "--samples",
        "3",
        "--interval",
        "0.2",
        env=env,
    )
    assert made.returncode == 0, made.stderr
    assert "3 samples" in made.stdout
    watched = run_cli("--replay", str(capture), "watch", "--format", "jsonl")  # no stand-in
    assert watched.returncode == 0, watched.stderr
    assert watched.stderr == ""
    records = [json.loads(line) for line in watched.stdout.splitlines()]
    assert len(records) == 3 * 8
    gpu0 = [r for r in records if r["gpu"] == 0]
    assert [r["power"] for r in gpu0] == [69.0, 250.0, 400.0]
    assert [r["power"] for r in records if r["gpu"] == 1] == [70.0] * 3
    assert all(r["errors"]["power"] == "GpuIsLost" for r in records if r["gpu"] == 7)
    seconds = [r["time"] - gpu0[0]["time"] for r in gpu0]
    recorded = [0.0, *(s["seconds"] for s in json.loads(capture.read_text())["samples"])]
    assert seconds == pytest.approx(recorded, abs=0.002)
    assert 0.2 <= seconds[1] < seconds[2]
    table = run_cli("--replay", str(capture), "watch", "--count", "2")
    rows = [line.split() for line in table.stdout.splitlines() if line.split()[1:2] == ["0"]]
    assert [row[2] for row in rows] == ["69", "250"]


def test_watch_of_a_one_sample_capture_says_so(node, tmp_path: Path) -> None:
    capture = tmp_path / "one.capture.json"
    made = run_cli("--root", str(node["tree"]), "capture", str(capture), env=node["env"])
    assert made.returncode == 0, made.stderr
    watched = run_cli("--replay", str(capture), "watch", "--format", "csv")
    assert watched.returncode == 0, watched.stderr
    assert "holds one sample" in watched.stderr and len(watched.stderr.splitlines()) == 1
    assert len(watched.stdout.splitlines()) == 1 + 8  # the header, then each GPU once
    interval = run_cli("--replay", str(capture), "watch", "--interval", "1")
    assert interval.returncode == 3 and "recorded" in interval.stderr
