"""The probe runner: concurrency, timeouts, errors, needs and cancellation."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from gpudiag.hostfs import HostFS
from gpudiag.model import ProbeStatus, Reading
from gpudiag.nvml import Nvml, ReplayBackend
from gpudiag.probe import Cost, Need, Probe, ProbeContext, run_probes
from gpudiag.probes import REGISTRY, default_probes

FIXTURES = Path(__file__).parent / "fixtures"


def _context(tmp_path: Path, is_root_user: bool = True, replay: str = "replay-2gpu.toml"):
    return ProbeContext(
        host=HostFS(tmp_path, is_root_user=is_root_user),
        nvml=Nvml(ReplayBackend.from_file(FIXTURES / replay)),
    )


def _probe(name: str, collect, timeout_s: float = 5.0, needs=frozenset()) -> Probe:
    return Probe(
        name=name, title=name, cost=Cost.INSTANT, needs=needs, collect=collect, timeout_s=timeout_s
    )


def test_hanging_probe_times_out_while_others_finish(tmp_path: Path) -> None:
    release = threading.Event()
    hanging = _probe("hangs", lambda ctx: [release.wait(30) and Reading("x", 1)], timeout_s=0.5)
    quick = _probe("quick", lambda ctx: [Reading("quick.value", 42)])
    started = time.monotonic()
    results = run_probes([hanging, quick], _context(tmp_path))
    elapsed = time.monotonic() - started
    release.set()
    assert [r.status for r in results] == [ProbeStatus.TIMEOUT, ProbeStatus.OK]
    assert results[0].error == "no answer within 0.5 s"
    assert results[0].duration_s >= 0.5
    assert results[1].readings == (Reading("quick.value", 42),)
    assert elapsed < 3.0


def test_raising_probe_is_an_error_result(tmp_path: Path) -> None:
    def boom(ctx):
        raise RuntimeError("sensor exploded")

    results = run_probes([_probe("boom", boom), _probe("ok", lambda c: [])], _context(tmp_path))
    assert results[0].status is ProbeStatus.ERROR
    assert results[0].error == "RuntimeError: sensor exploded"
    assert results[1].status is ProbeStatus.OK


def test_probes_run_concurrently(tmp_path: Path) -> None:
    sleepy = [_probe(f"s{i}", lambda ctx: [time.sleep(0.4) or Reading("k", 1)]) for i in range(5)]
    started = time.monotonic()
    results = run_probes(sleepy, _context(tmp_path))
    assert all(r.status is ProbeStatus.OK for r in results)
    assert time.monotonic() - started < 1.5  # 5 x 0.4 s in sequence would be 2 s


def test_cancel_flag_ends_the_run(tmp_path: Path) -> None:
    context = _context(tmp_path)
    release = threading.Event()

    def slow(ctx):
        release.wait(30)
        return []

    timer = threading.Timer(0.3, context.cancel.set)
    timer.start()
    started = time.monotonic()
    results = run_probes([_probe("slow", slow, timeout_s=20)], context)
    release.set()
    assert results[0].status is ProbeStatus.CANCELLED
    assert time.monotonic() - started < 2.0


def test_needs_are_checked_before_running(tmp_path: Path) -> None:
    ran = []
    root_probe = _probe("dimms", lambda ctx: ran.append(1) or [], needs=frozenset({Need.ROOT}))
    nvml_probe = _probe("gpus", lambda ctx: ran.append(2) or [], needs=frozenset({Need.NVML}))
    results = run_probes(
        [root_probe, nvml_probe],
        _context(tmp_path, is_root_user=False, replay="replay-no-driver.toml"),
    )
    assert [r.status for r in results] == [ProbeStatus.SKIPPED, ProbeStatus.SKIPPED]
    assert results[0].error == "needs root"
    assert results[1].error.startswith("needs NVML: nvmlInit: DriverNotLoaded")
    assert ran == []


def test_on_result_sees_every_result(tmp_path: Path) -> None:
    seen = []
    probes = [_probe("a", lambda c: []), _probe("b", lambda c: [])]
    run_probes(probes, _context(tmp_path), on_result=lambda r: seen.append(r.name))
    assert sorted(seen) == ["a", "b"]


def test_registry_names_are_unique_and_default_probes_do_not_load_the_gpu() -> None:
    names = [p.name for p in REGISTRY]
    assert len(names) == len(set(names))
    assert all(p.cost is not Cost.LOADS_GPU for p in default_probes())
    assert {"host", "driver"} <= set(names)
