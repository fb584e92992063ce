"""The TUI's watch screen says what bounds each GPU: the verdicts of gpudiag/telemetry on a
recorded node whose GPM counters answer (the faulty demo's replay, with the scripted
traces of tests/telemetry_traces.py recorded as GPM answers on GPUs 0-5), each
resource's share of its ceiling as a bar, at 80x24 and under NO_COLOR."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Static

from gpudiag import tomlcompat
from gpudiag.hostfs import HostFS
from gpudiag.nvml import Nvml, ReplayBackend
from gpudiag.rulefile import load_rules
from gpudiag.session import LiveNode
from gpudiag.telemetry.sampler import GPM_REQUEST, GPM_WHOLE_GPU
from gpudiag.tui import GpudiagApp

from conftest import REPO
from telemetry_traces import ALLREDUCE, FP64_VECTOR, GEMM, IDLE, LAUNCH, STREAM

FIXTURES = Path(__file__).parent / "fixtures"
TRACES = (STREAM, GEMM, ALLREDUCE, IDLE, LAUNCH, FP64_VECTOR)  # GPUs 0-5; 6: no GPM


def gpm_replay() -> dict[str, Any]:
    """The faulty demo's NVML replay with a GPM window recorded on GPUs 0-5 (GPU 6 in HW
    slowdown keeps the older counters, GPU 7 is lost), as a capture records them."""
    data = tomlcompat.loads((REPO / "snapshots" / "demo-hgx-h100-faulty.toml").read_text())
    key = ",".join(str(a) for a in (GPM_WHOLE_GPU, *GPM_REQUEST))
    for device, trace in zip(data["devices"], TRACES, strict=False):
        device["nvmlGpmQueryDeviceSupport"] = {"isSupportedDevice": 1}
        device["gpudiagGpmMetrics"] = {key: {str(m): float(v) for m, v in trace.items()}}
    return data


def gpm_node() -> LiveNode:
    return LiveNode(
        host=HostFS(FIXTURES / "host-basic"),
        nvml=Nvml(ReplayBackend(gpm_replay(), "gpm.json")),
        probes=[],  # the watch screen samples NVML itself: no probe is needed
        rules=load_rules(),
    )


class SampledOnce(GpudiagApp):
    """The app sampling once only: a snapshot of the screen holds the same samples
    however late the second tick of a loaded machine comes."""

    def _watch_tick(self) -> None:
        if not self.watch_history.latest:
            super()._watch_tick()


async def _sampled(pilot: Any) -> None:
    await pilot.press("9")
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


async def _sampled_and_read(pilot: Any) -> None:
    """The watch screen sampled once, and what it says of each GPU read."""
    await _sampled(pilot)
    text = str(pilot.app.query_one("#watch-text", Static).render())
    words = " ".join(text.split())
    assert "GPU 0: memory-bound: DRAM 88% of its 3.4 TB/s (datasheet" in words
    assert "GPU 1: compute-bound (tensor pipe): tensor 85% active" in text
    assert "GPU 2: NVLink-bound" in text
    assert "GPU 3: idle: active 0%" in text
    assert "GPU 4: latency-bound: active 95% with no pipe" in words
    assert "GPU 5: compute-bound (fp64 pipe): fp64 75% active" in text
    # no GPM: the older counters; idle comes before its clocks' HW slowdown
    assert "GPU 6: idle: active 0%" in text
    lines = text.splitlines()
    assert max(map(len, lines)) <= 77  # wrapped to the pane, never cut
    # GPU 0's bars: DRAM at 88% of the datasheet's bandwidth, tensor empty
    assert "DRAM   ███████·  88%" in text and "tensor ········   0%" in text
    assert lines[-1].startswith("GPU7   LOST")  # no verdict lines under a lost GPU


def test_watch_verdicts_snapshot_without_colour(snap_compare, monkeypatch) -> None:
    """The watch screen at 80x24 under NO_COLOR, its verdicts read first (Pilot): the
    bars and verdicts are characters and words, the rest one key away (the pane
    scrolls)."""
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("TERM", "xterm-256color")
    app = SampledOnce(gpm_node())
    assert snap_compare(app, run_before=_sampled_and_read, terminal_size=(80, 24))


@pytest.mark.parametrize("width", [40, 77, 200])
def test_verdict_lines_fit_any_width(width: int) -> None:
    from gpudiag.telemetry.explain import Explainer, verdict_lines

    judged = Explainer(Nvml(ReplayBackend(gpm_replay()))).judge(8, 1000.0)
    for verdict in judged.verdicts:
        lines = verdict_lines(verdict, width)
        assert all(len(line) <= width for line in lines), lines
        words = " ".join(" ".join(lines).split())
        assert verdict.text in words  # the whole sentence, wrapped


def test_a_saved_snapshot_shows_the_counter_window_it_recorded(tmp_path: Path) -> None:
    """`gpudiag --export`'s counter window (over the probing) goes into the snapshot as
    readings, and the watch screen of that saved snapshot judges it again; a GPU lost
    has no window, only its health reading, and is LOST."""
    from gpudiag.probes import default_probes
    from gpudiag.snapshot import load, save
    from gpudiag.telemetry.readings import ExportWindow

    node = gpm_node()
    node.probes = [p for p in default_probes() if p.name == "gpu"]  # the profile, by PCI id
    window = ExportWindow(node.nvml)
    path = tmp_path / "ticket.json"
    save(window.add_to(node.snapshot()), path)
    snapshot = load(path)
    readings = snapshot.readings_by_key
    assert readings["gpu.0.telemetry.dram"].value == 0.88
    assert readings["gpu.0.telemetry.source"].value == "gpm"
    assert readings["gpu.6.telemetry.tensor"].status.value == "unsupported"  # never 0
    assert "gpu.7.telemetry.source" not in readings  # lost: its health reading says so
    app = GpudiagApp(snapshot)

    async def scenario() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("9")
            text = ""
            for _ in range(100):  # the pane is built once shown: on a loaded machine, later
                await pilot.pause(0.05)
                text = " ".join(str(app.query_one("#watch-text", Static).render()).split())
                if text:
                    break
            assert "GPU 0: memory-bound: DRAM 88% of its 3.4 TB/s (datasheet (h100-sxm5))" in text
            assert "GPU 1: compute-bound (tensor pipe)" in text
            assert "GPU 7: LOST: it does not answer" in text

    asyncio.run(scenario())


def test_a_node_of_no_gpus_is_sampled_without_a_verdict() -> None:
    """NVML answers with no GPU: the watch screen says 0 GPUs (judging an empty round
    raised IndexError, said as 'sampling failed')."""
    empty = {"format": "gpudiag-nvml-replay", "version": 1, "system": {}, "devices": []}
    node = LiveNode(HostFS(FIXTURES / "host-basic"), Nvml(ReplayBackend(empty)), [], load_rules())
    app = SampledOnce(node)

    async def scenario() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await _sampled(pilot)
            status = str(app.query_one("#watch-status").render())
            assert status.startswith("0 GPUs, every 1 s"), status

    asyncio.run(scenario())
