"""A ticket carries the counters: `gpudiag capture --samples N` records each sample's GPM
window (through the real pynvml against the C stand-in's scripted traces, not a GPU),
and `gpudiag --replay CAPTURE watch --explain` judges the recorded windows again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import REPO, built_once, run_cli
from standin import build, environment
from telemetry_traces import flat, verdicts_node

HOST = REPO / "tests" / "fixtures" / "host-basic"


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Node "verdicts" captured with three samples: GPM windows 1-3 of its trace."""
    library, _ = built_once(
        tmp_path_factory, "nvml-standin-current", lambda f: str(build("current", f))
    )
    work = tmp_path_factory.mktemp("telemetry-capture")
    trace = work / "verdicts.flat"
    trace.write_text(flat(verdicts_node()))
    env = environment(library, trace, work / "calls.log")
    capture = work / "node.capture.json"
    made = run_cli(
        "--root", str(HOST), "capture", str(capture), "--samples", "3", "--interval", "0.01",
        env=env,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    return capture


def test_a_capture_records_each_samples_counter_window(captured: Path) -> None:
    data = json.loads(captured.read_text())
    recordings = [data["nvml"], *(s["nvml"] for s in data["samples"])]
    gpm = [r["devices"][0]["gpudiagGpmMetrics"] for r in recordings]
    windows = [next(iter(g.values())) for g in gpm]
    # the first recording's window spans the probing, each later one the interval since
    assert all(isinstance(w, dict) and w["10"] == 88.0 for w in windows)  # DRAM 88%
    lost = recordings[1]["devices"][7]["gpudiagGpmMetrics"]
    assert next(iter(lost.values())) == {"error": "GpuIsLost"}  # GPU 7 in window 2


def test_watch_explain_on_the_replay_shows_the_recorded_verdicts(captured: Path) -> None:
    watched = run_cli("--replay", str(captured), "watch", "--explain", "--format", "jsonl")
    assert watched.returncode == 0, watched.stderr
    said = [
        json.loads(line)["explain"] for line in watched.stdout.splitlines() if "explain" in line
    ]
    rounds = [said[i : i + 8] for i in range(0, 24, 8)]
    assert len(said) == 24  # 8 GPUs, 3 samples, no straggler on this node
    first = rounds[0]
    assert first[0].startswith("GPU 0: memory-bound: DRAM 88% of its 3.4 TB/s")
    assert first[1].startswith("GPU 1: compute-bound (tensor pipe)")
    assert first[2].startswith("GPU 2: NVLink-bound")
    assert first[3].startswith("GPU 3: throttled: power cap at 1,500 of 1,980 MHz")
    assert first[4] == "GPU 4: idle: active 0%"
    assert first[5].startswith("GPU 5: latency-bound")  # its MIG instance's window
    assert first[6].startswith("GPU 6: PCIe-bound")  # no GPM: the older counters
    assert first[7].startswith("GPU 7: compute-bound (fp64 pipe)")
    assert rounds[1][7] == "GPU 7: LOST: it does not answer"  # in that window only
    assert rounds[2][7].startswith("GPU 7: compute-bound (fp64 pipe)")
    assert rounds[2][4].startswith("GPU 4: UNKNOWN: the counters are held by another")
