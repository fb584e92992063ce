"""What bounds each GPU (gpudiag/telemetry): scripted GPM counter traces through the real
pynvml against the C NVML stand-in give every verdict (one stand-in build and one
subprocess for all of them); the ceilings, thresholds and verdict rules in process."""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from test_formats import promtool_check

from gpudiag.cli import build_parser
from gpudiag.demo import demo_file
from gpudiag.model import KernelResult, ProbeStatus, Statistics
from gpudiag.nvml import Nvml, ReplayBackend
from gpudiag.profiles import load_profiles
from gpudiag.telemetry.explain import Explainer, node_ceilings
from gpudiag.telemetry.history import HourBuffer
from gpudiag.telemetry.monitor import Monitor
from gpudiag.telemetry.sampler import Window
from gpudiag.telemetry.verdicts import (
    ThresholdError,
    ceilings_for,
    classify,
    parse_thresholds,
    shipped_thresholds,
    thresholds_path,
)
from gpudiag.watch import watch

from conftest import REPO, built_once
from standin import build, environment, run_python
from telemetry_traces import (
    MONITOR_SCRIPT,
    SAMPLER_SCRIPT,
    WINDOWS,
    flat,
    straggler_node,
    verdicts_node,
)

PEAKS = load_profiles()["h100-sxm5"].values
OLD_BINDING = REPO / ".nvml-old"


def standin_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The current stand-in, built once per pytest run."""
    folder, _ = built_once(
        tmp_path_factory, "nvml-standin-current", lambda f: str(build("current", f))
    )
    return folder


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Both trace nodes sampled window by window through the real pynvml."""
    library = standin_library(tmp_path_factory)
    work = tmp_path_factory.mktemp("telemetry")
    nodes = []
    for name, gpus, windows, mig in (
        ("verdicts", verdicts_node(), WINDOWS, {}),  # GPU 5's MIG instance: found
        ("straggler", straggler_node(), 2, {}),
    ):
        path = work / f"{name}.flat"
        path.write_text(flat(gpus))
        nodes.append([name, str(path), windows, mig])
    log = work / "calls.log"
    env = environment(library, Path(nodes[0][1]), log)
    code = SAMPLER_SCRIPT + MONITOR_SCRIPT  # one interpreter for both (its start: 0.3 s)
    run = run_python(code, env, json.dumps(nodes), nodes[0][1], str(WINDOWS))
    assert run.returncode == 0, run.stderr[-2000:]
    sampled, monitored = run.stdout.splitlines()
    return {"out": json.loads(sampled), "log": log.read_text(), "monitor": json.loads(monitored)}


def test_every_verdict_from_the_traces_through_the_real_pynvml(traced: dict[str, Any]) -> None:
    rows = traced["out"]["verdicts"]
    first = rows[0]["verdicts"]  # the first GPM sample has no window before it
    assert [v[0] for v in first] == ["unknown"] * 6 + ["pcie", "unknown"]
    assert "GPM needs two samples" in first[0][2]
    kinds = [(v[0], v[1]) for v in rows[1]["verdicts"]]
    assert kinds == [
        ("memory", ""),
        ("compute", "tensor"),
        ("nvlink", ""),
        ("throttled", "power cap"),
        ("idle", ""),
        ("latency", ""),
        ("pcie", ""),
        ("compute", "fp64"),
    ]
    texts = [v[2] for v in rows[1]["verdicts"]]
    assert texts[0].startswith("GPU 0: memory-bound: DRAM 88% of its 3.4 TB/s (datasheet")
    assert texts[3].startswith("GPU 3: throttled: power cap at 1,500 of 1,980 MHz, 700 of 700 W")
    assert "tensor 85%" in texts[3]
    assert rows[1]["sources"][6] == "older" and rows[1]["sources"][0] == "gpm"
    assert rows[1]["stragglers"] == []  # every GPU has its own work: none waits


@pytest.mark.skipif(
    not (OLD_BINDING / "pynvml.py").is_file(),
    reason=f"the oldest admitted nvidia-ml-py is not installed at {OLD_BINDING} (.ci/run)",
)
def test_the_oldest_binding_reads_the_same_verdicts(
    traced: dict[str, Any], tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """nvidia-ml-py 12.535.161 declares nvmlGpmMetricsGet_t with 98 metrics (13.x: 477):
    the same calls, the same verdicts."""
    (tmp_path / "node.flat").write_text(flat(verdicts_node()))
    library = standin_library(tmp_path_factory)
    env = environment(library, tmp_path / "node.flat", tmp_path / "calls.log", str(OLD_BINDING))
    node = [["verdicts", str(tmp_path / "node.flat"), WINDOWS, {}]]
    run = run_python(SAMPLER_SCRIPT, env, json.dumps(node))
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout)["verdicts"] == traced["out"]["verdicts"]
    assert "BADPOINTER" not in (tmp_path / "calls.log").read_text()


def test_a_lost_sample_is_lost_in_that_window_only(traced: dict[str, Any]) -> None:
    rows = traced["out"]["verdicts"]
    assert [row["verdicts"][7][0] for row in rows[1:]] == ["compute", "lost", "compute"]
    assert rows[2]["verdicts"][7][2] == "GPU 7: LOST: it does not answer"
    assert [v[0] for v in rows[2]["verdicts"][:7]] == [v[0] for v in rows[1]["verdicts"][:7]]


def test_counters_held_by_another_profiler_are_unknown(traced: dict[str, Any]) -> None:
    held = traced["out"]["verdicts"][3]["verdicts"][4]
    assert held[0] == "unknown" and "held by another profiler" in held[2]


def test_the_straggler_among_eight_is_named_with_why(traced: dict[str, Any]) -> None:
    row = traced["out"]["straggler"][1]
    assert row["stragglers"] == [
        "GPU 5 holds the others: HW slowdown at 1,410 of 1,980 MHz (peers 1,980 MHz); "
        "its SMs 95% active while the others' 40%"
    ]
    assert [v[0] for v in row["verdicts"]] == ["nvlink"] * 5 + ["throttled"] + ["nvlink"] * 2


def test_the_stand_in_saw_good_pointers_samples_and_the_mig_call(traced: dict[str, Any]) -> None:
    log = traced["log"]
    assert "BADPOINTER" not in log and "BADSAMPLE" not in log
    assert "CALL nvmlGpmMigSampleGet gpu=5 args=1 -> 0" in log
    assert "CALL nvmlGpmMetricsGet gpu=0 metrics=15 -> 0" in log
    assert "UNRECORDED nvmlGpm" not in log


def _window(**values: float | None) -> Window:
    window = Window(0, 0.0, values=dict(values))
    window.sm_clock_mhz, window.max_sm_clock_mhz = 1980.0, 1980.0
    return window


def _result(kernel: str, device: str, metric: str, median: float) -> KernelResult:
    stats = Statistics(5, median, median, median, median, 0.0, median, median)
    return KernelResult(kernel, device, metric, "GB/s", ProbeStatus.OK, (median,), stats)


def test_the_nodes_own_stream_and_gemm_are_the_ceilings() -> None:
    kernels = [
        _result("stream", "gpu0", "triad", 2900.0),
        _result("gemm", "gpu0", "bf16", 742.0),  # 0.75 of the 989.5 datasheet
        _result("stream", "gpu1", "triad", 3100.0),  # another GPU's: not this one's
    ]
    ceilings = ceilings_for(0, PEAKS, "h100-sxm5", kernels)
    assert ceilings.dram is not None and ceilings.dram.value == 2900e9
    memory = classify(_window(gr_active=1.0, dram=0.8, tensor=0.05), ceilings)
    assert memory.kind == "memory"
    assert memory.text == (
        "GPU 0: memory-bound: DRAM 92% of its 2.9 TB/s (STREAM triad on GPU 0), tensor 7%"
    )
    gemm = classify(_window(gr_active=1.0, dram=0.2, tensor=0.6), ceilings)
    assert gemm.kind == "compute" and gemm.word == "tensor"
    assert "tensor 60% active (80% of the BF16 GEMM on GPU 0's)" in gemm.text
    # against the datasheet alone, the same tensor activity is at the boundary, not over
    plain = ceilings_for(0, PEAKS, "h100-sxm5")
    assert classify(_window(gr_active=1.0, dram=0.2, tensor=0.55), plain).kind == "latency"


def test_a_busy_gpu_without_pipe_counters_is_unknown_never_zero() -> None:
    window = _window(gr_active=0.9, mem_busy=0.2)
    window.source = "older"
    verdict = classify(window, ceilings_for(0, PEAKS, "h100-sxm5"))
    assert verdict.kind == "unknown" and "no GPM on this GPU" in verdict.text


def test_the_thresholds_are_data_with_a_reason_each() -> None:
    text = thresholds_path().read_text()
    assert shipped_thresholds()["memory_dram"] == 0.7
    with pytest.raises(ThresholdError, match="missing"):
        parse_thresholds(text.replace("[threshold.pcie]", "[threshold.pci]"), "t.toml")
    broken = text.replace(
        '[threshold.nvlink]\nvalue = 0.5\nreason = """',
        '[threshold.nvlink]\nvalue = 0.5\nreason2 = """',
    )
    with pytest.raises(ThresholdError, match=r"threshold\.nvlink holds value and reason"):
        parse_thresholds(broken, "t.toml")


@pytest.fixture(scope="module")
def monitored(traced: dict[str, Any]) -> dict[str, Any]:
    """The monitor on the "verdicts" node for its 4 windows, scraped over HTTP."""
    return traced["monitor"]


def test_a_scrape_of_the_monitor_passes_promtool(monitored: dict[str, Any]) -> None:
    scrape = monitored["scrape"]
    checked = promtool_check(scrape)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert 'gpudiag_gpu_bound_by{detail="power cap",gpu="3",verdict="throttled"} 1.0' in scrape
    assert 'gpudiag_gpu_dram_bandwidth_ratio{gpu="0"} 0.88' in scrape
    assert 'gpudiag_gpu_interconnect_bytes_total{direction="tx",gpu="2",link="nvlink"}' in scrape
    # GPU 6 has no GPM: its SM activity is left out, never 0; GPU 4's counters were held
    assert 'gpudiag_gpu_sm_active_ratio{gpu="6"}' not in scrape
    assert 'gpudiag_gpu_sm_active_ratio{gpu="4"}' not in scrape
    assert "pid" not in scrape  # no per-process label


def test_the_monitor_says_each_change_and_keeps_a_bounded_ring(monitored: dict[str, Any]) -> None:
    events = [line.split("  ", 1)[1] for line in monitored["events"]]
    assert "clock     GPU 3: power cap began" in events
    gpu7 = [e for e in events if "GPU 7:" in e]
    assert [e.split(": ")[1] for e in gpu7] == [
        "UNKNOWN",
        "compute-bound (fp64 pipe)",
        "LOST",
        "compute-bound (fp64 pipe)",
    ]
    assert monitored["ring"] == 2  # ring=2 over 4 windows


def test_gpudiag_monitor_ends_cleanly_on_sigterm(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """The command as a systemd unit runs it: windows until SIGTERM, the textfile written
    atomically after each, the hour so far written to the history by its writer process
    at the end, exit 0."""
    library = standin_library(tmp_path_factory)
    (tmp_path / "node.flat").write_text(flat(straggler_node()))
    env = environment(library, tmp_path / "node.flat", tmp_path / "calls.log")
    textfile = tmp_path / "gpudiag.prom"
    command = [
        sys.executable,
        "-m",
        "gpudiag",
        "monitor",
        "--interval",
        "0.05",
        "--textfile",
        str(textfile),
        "--history",
        str(tmp_path),
    ]
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 30
    while 'gpudiag_gpu_straggler{gpu="5"} 1.0' not in (
        textfile.read_text() if textfile.exists() else ""
    ):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=10)
    assert process.returncode == 0, err
    assert "Traceback" not in err
    assert "straggler GPU 5 holds the others: HW slowdown at 1,410 of 1,980 MHz" in out
    assert len(list(tmp_path.glob("date=*/*.parquet"))) == 1
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".gpudiag-")] == []


def test_watch_explain_adds_a_narrow_bound_by_column_and_the_reasons() -> None:
    """`gpudiag watch --explain` on the faulty demo replay (no GPM recorded: the older
    counters): the bound-by word beside each GPU's number, its sentence under the round."""
    nvml = Nvml(ReplayBackend.from_file(demo_file("faulty")))
    lines: list[str] = []
    watch(
        nvml, 1.0, 1, "table", lines.append, sleep=lambda _: None, explain=Explainer(nvml, "table")
    )
    header, _units, *rows = lines[:10]
    assert header.split()[:3] == ["time", "gpu", "bound"]
    assert [row.split()[2] for row in rows] == ["idle"] * 7 + ["LOST"]
    assert lines[-1] == " " * 10 + "GPU 7: LOST: it does not answer"
    assert " " * 10 + "GPU 0: idle: active 0%" in lines
    plain: list[str] = []
    watch(nvml, 1.0, 1, "table", plain.append, sleep=lambda _: None)
    assert "bound" not in plain[0] and len(plain) == 10  # without --explain: as before


def test_the_example_service_runs_a_command_line_gpudiag_accepts() -> None:
    text = (REPO / "examples" / "gpudiag-monitor.service").read_text()
    start = re.search(r"^ExecStart=(.+?)(?<!\\)$", text.replace("\\\n", " "), re.M)
    assert start is not None
    words = shlex.split(start.group(1))
    assert words[0].endswith("/gpudiag") and words[1] == "monitor"
    args = build_parser().parse_args(words[1:])
    assert args.listen == ":9841" and args.interval == 1.0
    assert args.textfile.endswith(".prom")


def test_each_hour_of_windows_is_appended_to_parquet(tmp_path: Path) -> None:
    """The monitor's history: a file per hour (split at the hour), one row per GPU per
    window, a metric not measured null (never 0), Hive-partitioned by date."""
    import polars as pl

    nvml = Nvml(ReplayBackend.from_file(demo_file("faulty")))
    history = HourBuffer(tmp_path, "node1", in_process=True)
    monitor = Monitor(nvml, 8, node_ceilings(nvml, 8), lambda _: None, history=history)
    for when in (7198.0, 7199.0, 7200.0):  # 01:59:58, 01:59:59, 02:00:00 (UTC)
        monitor.step(now=when)
    monitor.close()
    files = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.parquet"))
    assert files == [
        "date=1970-01-01/node1-01-59-58.parquet",
        "date=1970-01-01/node1-02-00-00.parquet",
    ]
    table = pl.read_parquet(tmp_path / "date=1970-01-01" / "*.parquet").sort("time", "gpu")
    assert table.height == 24 and table["node"].unique().to_list() == ["node1"]
    gpu0 = table.filter(pl.col("gpu") == 0)
    assert gpu0["verdict"].cast(str).to_list() == ["idle"] * 3
    assert gpu0["power_w"].to_list() == [69.0] * 3
    assert gpu0["sm_active"].null_count() == 3  # the demo records no GPM: null, not 0
    assert table.filter(pl.col("gpu") == 7)["verdict"].cast(str).to_list() == ["lost"] * 3
    assert not any((tmp_path / ".spool").iterdir())
