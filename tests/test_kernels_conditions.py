"""Conditions beside the figures (issue 35): every GPU STREAM, GEMM, copy and all-reduce
result records the clocks, power, temperature and clock-event reasons of its run, and a
slow figure under a power cap, a thermal or a hardware slowdown names that cause and its
action instead of calling the GPU slow. NVML's answers are scripted (tests/fakecuda.py,
ScriptedNvml); the kernels run on the CUDA fake: no GPU figure is claimed here."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudiag.kernels import gemm
from gpudiag.kernels.conditions import (
    ConditionSampler,
    clock_state,
    conditions_params,
    ran_under,
    sample,
)
from gpudiag.kernels.plans import KernelPlan
from gpudiag.kernels.runner import PlanRun
from gpudiag.kernels.stats import summarize
from gpudiag.model import KernelResult, ProbeStatus, Severity, Snapshot
from gpudiag.nvml import Nvml
from gpudiag.rulefile import load_rules
from gpudiag.session import with_kernel_results

from conftest import demo_on_host_basic
from fakenvml import GpuScript, ScriptedNvml
from hosttree import pci_tree

RULES = load_rules()


def test_every_gpu_figure_records_what_it_ran_under(cuda, tmp_path: Path, monkeypatch) -> None:
    """GPU 0 at full clocks, GPU 1 with its power limit lowered to 450 W and capped (one
    GEMM precision: the fake's GEMMs are the slow part, and each runs alike)."""
    monkeypatch.setattr(gemm, "PRECISIONS", ("fp16",))
    scripts = [
        GpuScript(sm_clock=[1980, 1965, 1980]),
        GpuScript(sm_clock=1410, power_w=449, power_limit_w=450, events=("SwPowerCap",)),
    ]
    host = pci_tree(tmp_path, {"0000:18:00.0": "0x2330", "0000:19:00.0": "0x2330"})
    plan = KernelPlan(("stream", "gemm", "copy", "allreduce"), "gpu", 1 << 16, trials=2, gemm_n=64)
    results = PlanRun(plan, host=host, nvml=Nvml(ScriptedNvml(scripts))).run()
    ok = [r for r in results if r.status is ProbeStatus.OK]
    assert {r.kernel for r in ok} >= {"stream", "gemm", "copy", "allreduce"}
    capped = next(r for r in ok if r.device == "gpu1" and r.kernel == "gemm")
    assert ran_under(capped.params) == (
        "ran at SM 1410-1410 of 1980 MHz, memory 2619 MHz, 449 W of 450, 60 C, "
        "clock events: SwPowerCap"
    )  # the line `gpudiag run` prints under the figure
    for result in ok:
        params = dict(result.params)
        assert params["condition_samples"] >= 2, result
        assert {"sm_clock_min_mhz", "mem_clock_median_mhz", "power_limit_w"} <= set(params)
        if result.device == "gpu0":
            assert params["clock_events"] == "none" and params["sm_clock_max_mhz"] == 1980
            assert params["power_limit_w"] == 700 and params["sm_clock_min_mhz"] >= 1965
        elif result.device == "gpu1":
            assert params["clock_events"] == "SwPowerCap" and params["power_limit_w"] == 450
            assert params["sm_clock_median_mhz"] == 1410
        else:  # all-reduce: both GPUs' samples
            assert result.device == "gpus" and params["clock_events"] == "SwPowerCap"
            assert params["sm_clock_min_mhz"] == 1410


def test_a_run_without_nvml_says_its_conditions_are_unknown(cuda) -> None:
    plan = KernelPlan(("stream",), "gpu", 1 << 16, trials=2)
    nvml = Nvml(ScriptedNvml([GpuScript()] * 2, fail_init="DriverNotLoaded"))
    results = PlanRun(plan, nvml=nvml).run()
    said = {dict(r.params).get("conditions") for r in results if r.status is ProbeStatus.OK}
    assert len(said) == 1 and said.pop().startswith("not sampled: NVML unavailable")


def test_idle_samples_do_not_lower_the_clocks_of_a_run() -> None:
    idle = {"sm_clock": 345, "mem_clock": 1593, "events": ["GpuIdle"]}
    busy = {"sm_clock": 1980, "mem_clock": 2619, "events": []}
    params = dict(conditions_params([idle, busy, busy]))
    assert (params["sm_clock_min_mhz"], params["clock_events"]) == (1980, "none")
    assert params["condition_samples"] == 3
    # an NVML that answers none of the calls (a replay without them): said, not zeros
    assert conditions_params([{}, {}]) == (
        ("conditions", "not sampled: NVML answered none of its calls"),
    )
    assert ran_under(conditions_params([{}, {}])) == ""


def test_a_series_gives_its_minimum_and_median_and_an_old_driver_its_reasons() -> None:
    script = GpuScript(
        sm_clock=[1980, 1500, 1980, 1970], no_event_api=True, events=[(), ("SwThermalSlowdown",)]
    )
    nvml = Nvml(ScriptedNvml([script]))
    sampler = ConditionSampler(nvml, period=60.0)  # only the first and last samples
    with sampler.watch([0]) as taken:
        taken[0].append(sample(nvml, 0))
    params = dict(sampler.params([0], taken))
    # three samples (start, the one above, end): 1980, 1500, 1980
    assert (params["sm_clock_min_mhz"], params["sm_clock_median_mhz"]) == (1500, 1980)
    assert params["clock_events"] == "SwThermalSlowdown"  # through the throttle-reasons call


def _figure(metric: str, value: float, ran_under: tuple) -> KernelResult:
    samples = [value * f for f in (0.995, 1.0, 1.005, 0.998, 1.002, 1.001)]
    return KernelResult(
        "gemm", "gpu0", metric, "TFLOP/s", ProbeStatus.OK, tuple(samples), summarize(samples),
        (("precision", metric), *ran_under),
    )  # fmt: skip


@pytest.fixture(scope="module")
def node() -> Snapshot:
    """The demo HGX H100 replayed on a small host tree (only its GPUs matter here)."""
    return demo_on_host_basic()


def _sampled(events: tuple[str, ...], limit_w: float = 700, temperature: float = 70) -> tuple:
    taken = {"sm_clock": 1400, "mem_clock": 2619, "power_mw": limit_w * 995, "events": events}
    taken |= {"power_limit_mw": limit_w * 1000, "temperature": temperature}
    return conditions_params([taken, taken], {"sm_clock_max": 1980, "mem_clock_max": 2619})


# (what NVML said over the run, the words KRN024 must say)
HELD_BACK = [
    (_sampled(("SwPowerCap",), limit_w=450), "power limit 450 W of 700: raise it"),
    (_sampled(("SwPowerCap",)), "at its power limit (696.5 W drawn, limit 700 W, not under"),
    (_sampled(("HwThermalSlowdown",), temperature=92), "at 92 C: the GPU slowed itself down"),
    (_sampled(("HwSlowdown", "SwPowerCap")), "HwSlowdown: the board asked for a hardware"),
    (_sampled(("ApplicationsClocksSetting",)), "reset them (nvidia-smi -i 0 -rac)"),
]


@pytest.mark.parametrize(("ran_under", "said"), HELD_BACK)
def test_a_slow_figure_held_back_names_its_cause_and_action(node, ran_under, said) -> None:
    """FP16 GEMM at 300 TFLOP/s on an H100 SXM5 (band floor 494.75): under a cause, KRN024
    names it with its action and KRN008 does not call the GPU slow."""
    judged = with_kernel_results(node, [_figure("fp16", 300, ran_under)], RULES, "h100-sxm5")
    found = {f.rule_id: f for f in judged.findings if f.subject == "GPU 0"}
    assert found["KRN024"].severity is Severity.WARNING and said in found["KRN024"].message
    assert found["KRN008"].severity is Severity.NOT_APPLICABLE


def test_only_a_slow_figure_at_full_clocks_is_the_gpus(node) -> None:
    full = _sampled(())
    assert clock_state(dict(full))[0] == "full"
    slow = with_kernel_results(node, [_figure("fp16", 300, full)], RULES, "h100-sxm5")
    found = {f.rule_id: f for f in slow.findings if f.subject == "GPU 0"}
    assert found["KRN008"].severity is Severity.WARNING and "KRN024" not in found
    # a healthy figure under a power cap (a large GEMM at 700 W) is no finding at all
    capped = _sampled(("SwPowerCap",))
    fine = with_kernel_results(node, [_figure("fp16", 690, capped)], RULES, "h100-sxm5")
    said = {f.rule_id: f.severity for f in fine.findings if f.rule_id in ("KRN008", "KRN024")}
    assert said in ({}, {"KRN008": Severity.NOT_APPLICABLE})
    # an old snapshot's figure, without conditions: judged as before
    old = with_kernel_results(node, [_figure("fp16", 300, ())], RULES, "h100-sxm5")
    assert [f.severity for f in old.findings if f.rule_id == "KRN008"] == [Severity.WARNING]
