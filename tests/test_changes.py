"""Issue 41: change points in each node's history (Apache Otava's detector), roll-outs, two
runs of a fleet against its drift, A/B verdicts that say what to do (gpudiag/stats.py),
and the labelled benchmark's error rates (benchmarks/change_errors.py at its smallest)."""

from __future__ import annotations

import asyncio
import json
import math
import random
import sys
import warnings
from dataclasses import replace
from pathlib import Path

import pytest
from textual.widgets import Static, TabbedContent

from gpudiag import stats
from gpudiag.fleet.analysis import analyse
from gpudiag.fleet.changes import (
    change_points,
    compare_groups,
    compare_runs,
    config_roll_outs,
    history_report,
)
from gpudiag.fleet.load import load_fleet
from gpudiag.fleet.report import report_json, report_text
from gpudiag.fleet.screen import FleetApp

from conftest import REPO
from fleetgen import HISTORY_KEYS, HistoryPlant, history_fleet, write_history

TRIAD = HISTORY_KEYS[0]
NEW_DRIVER = {"nvml.driver_version": "575.57.08"}


# ------------------------------------------------------------------ statistics


def test_student_t_matches_scipys_published_values() -> None:
    # scipy.stats.t.sf(2.0, 10) * 2 = 0.07338803477074, t.ppf(0.975, 10) = 2.2281388519649
    assert stats.t_two_sided(2.0, 10) == pytest.approx(0.07338803477074, rel=1e-9)
    assert stats.t_quantile(0.975, 10) == pytest.approx(2.2281388519649, rel=1e-9)
    assert stats.t_two_sided(0.0, 5) == pytest.approx(1.0)
    # scipy.stats.ttest_ind_from_stats(10, 1, 8, 11, 1, 8): t -2.0, p 0.06528795288
    t, p = stats.ttest_ind_from_stats(10.0, 1.0, 8, 11.0, 1.0, 8)
    assert (t, p) == (pytest.approx(-2.0), pytest.approx(0.06528795288, rel=1e-8))


def test_runs_needed_follows_the_power_formula() -> None:
    # 2% at alpha 0.01 and power 0.9: about 8 runs a side at CV 1%, 30 at CV 2%
    assert stats.runs_needed(0.01) == 8 and stats.runs_needed(0.02) == 30


def test_benjamini_hochberg_on_a_worked_example() -> None:
    p = [0.01, 0.04, 0.03, 0.005, 0.5]  # sorted: .005 .01 .03 .04 .5 vs .01 .02 .03 .04 .05
    assert stats.fdr(p, 0.05) == [True, True, True, True, False]
    assert stats.fdr([0.03, 0.5], 0.05) == [False, False]  # .03 > .025, .5 > .05


def test_ab_verdicts_say_different_same_or_how_many_more_runs() -> None:
    rng = random.Random(41)
    a = [100 * rng.gauss(1.0, 0.01) for _ in range(12)]
    slower = [100 * rng.gauss(0.968, 0.01) for _ in range(12)]
    v = stats.ab_verdict(a, slower, higher_is_better=True)
    assert v.kind == "different" and v.line().startswith("different: B is ")
    assert v.line().endswith("] slower") and v.shift.low < -3.2 < v.shift.high < 0
    many = [100 * rng.gauss(1.0, 0.002) for _ in range(40)]
    same = stats.ab_verdict(many, [x * 1.001 for x in reversed(many)], margin=0.01)
    assert same.kind == "same" and same.line().startswith("same: within +-1%")
    few = stats.ab_verdict(a[:4], [100 * rng.gauss(0.99, 0.02) for _ in range(4)])
    assert few.kind == "inconclusive" and few.runs == stats.runs_needed(few.shift.cv)
    assert "more runs per side would decide a 2% difference at this noise" in few.line()
    # enough runs to see 2% (18 a side at CV 1.5%), too few to show it within +-1%
    wide = [98.5, 101.5] * 20
    under = stats.ab_verdict(wide, [x * 1.003 for x in wide])
    assert (under.kind, under.runs, under.same_runs) == ("inconclusive", 18, 123)
    assert under.line().startswith(
        "inconclusive: under a 2% difference; about 83 more runs per side would show whether "
        "it is within +-1% at this noise (CV 1.5%; B +0.3% [-0.4, +1.0])"
    )


# ------------------------------------------------------------------ change points


def _series(values: list[float]) -> list[float]:
    rng = random.Random(7)
    return [v * rng.gauss(1.0, 0.01) for v in values]


def test_a_drift_of_half_a_percent_a_run_is_found_one_odd_run_is_not() -> None:
    drift = _series([100.0 * (1 - 0.005 * i) for i in range(20)])
    found = change_points(drift)
    assert found and all(s.pct < 0 for _, s in found)
    odd = _series([100.0] * 20)
    odd[10] *= 0.9
    assert change_points(odd) == []
    step = _series([100.0] * 10 + [96.0] * 10)
    [(index, s)] = change_points(step)
    assert index == 10 and s.low < -4.0 + 1.5 and s.high > -4.0 - 1.5 and s.high < 0


def test_two_runs_of_200_nodes_name_the_three_planted_regressions() -> None:
    plants = (
        HistoryPlant(("node0017",), 0.95, 2),  # every GPU
        HistoryPlant(("node0088",), 0.90, 2, gpu=3),
        HistoryPlant(("node0150",), 0.97, 2, gpu=5),
    )
    result = compare_runs(history_fleet(200, 2, plants))
    named = {s.node for s in result.shifts}
    assert {"node0017", "node0088", "node0150"} <= named and len(named) <= 3 + 5
    assert {s.device for s in result.shifts if s.node == "node0088"} == {"GPU 3"}
    assert all(s.slower for s in result.shifts if s.node in ("node0017", "node0088"))
    assert len(result.drifts) == 2 and all(abs(d.pct) < 1.0 for d in result.drifts)
    # faster is shown as well as slower
    up = compare_runs(history_fleet(200, 2, (HistoryPlant(("node0009",), 1.06, 2),)))
    assert [(s.node, s.slower) for s in up.shifts][:1] == [("node0009", False)]


def test_a_driver_roll_out_is_named_with_its_run_nodes_change_and_effect() -> None:
    nodes = tuple(f"node{n:04d}" for n in range(5, 201, 5))  # 40 of 200
    rollout = HistoryPlant(nodes, 0.97, 12, metrics=(TRIAD,), config=NEW_DRIVER)
    history = history_fleet(200, 20, (rollout,), gpus=2)
    [found] = [r for r in config_roll_outs(history) if r.metric == TRIAD]
    assert found.run == 12 and found.nodes == nodes and found.slower
    assert found.changed == (("nvml.driver_version", "590.48.01", "575.57.08"),)
    assert found.low < -3.0 < found.high < 0
    assert "from run 12" in found.line() and "node[0005,0010," in found.line()
    verdicts = compare_groups(history, "nvml.driver_version", "590.48.01", "575.57.08")
    triad = next(v for name, _, _, v in verdicts if name == TRIAD)
    assert triad is not None and triad.kind == "different"
    assert triad.line("575.57.08").startswith("different: 575.57.08 is 3.")


# ------------------------------------------------------------------ the fleet report


@pytest.fixture(scope="module")
def small_history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 nodes measured 8 times, written as snapshot files: two get the new driver at
    run 5, 4% slower from then on."""
    directory = tmp_path_factory.mktemp("history")
    plant = HistoryPlant(("node0002", "node0004"), 0.96, 5, config=NEW_DRIVER)
    write_history(directory, history_fleet(4, 8, (plant,)))
    return directory


def test_the_fleet_report_history_is_change_points_not_every_pair_of_runs(
    small_history: Path, tmp_path: Path
) -> None:
    loaded = load_fleet([str(small_history)], 1)
    report = analyse(loaded, compare=("nvml.driver_version", "590.48.01", "575.57.08"))
    # the pairwise interval test called most runs of each node slower than the one before
    assert report.regressions == []
    [triad, h2d] = sorted(
        (r for r in report.history.roll_outs), key=lambda r: r.metric, reverse=True
    )
    assert triad.nodes == h2d.nodes == ("node0002", "node0004") and triad.run == 5
    assert report.odd_nodes() == ["node0002", "node0004"]
    text = report_text(report, markdown=False)
    assert "roll-out: stream.triad.fp64 -4." in text and "from run 5" in text
    assert "after nvml.driver_version 590.48.01 -> 575.57.08" in text
    assert "compare nvml.driver_version=590.48.01,575.57.08 stream.triad.fp64" in text
    markdown = report_text(report, markdown=True)
    assert "- roll-out: stream.triad.fp64" in markdown
    data = json.loads(json.dumps(report_json(report)))
    rolls = data["history"]["roll_outs"]
    assert {r["nodes"] for r in rolls} == {"node[0002,0004]"} and rolls[0]["run"] == 5
    assert data["history"]["compare"][0]["what"] == "nvml.driver_version=590.48.01,575.57.08"
    # the same history from the Parquet file the fleet writes
    from gpudiag.fleet.parquet import write_parquet

    write_parquet(report, str(tmp_path / "fleet.parquet"), loaded)
    again = analyse(
        load_fleet([str(tmp_path / "fleet.parquet")], 1),
        compare=("nvml.driver_version", "590.48.01", "575.57.08"),
    )
    assert report_json(again)["history"] == report_json(report)["history"]
    charts = {(c["metric"], c["label"]): c for c in data["history"]["charts"]}
    drawn = charts[(TRIAD, "node[0002,0004] (2 nodes)")]
    assert drawn["change_runs"] == [5] and len(drawn["values"]) == 8
    assert min(drawn["values"][4:]) < 0.97 * min(drawn["values"][:4])
    assert "chart: stream.triad.fp64 node[0002,0004] (2 nodes): " in text
    line = next(x for x in text.splitlines() if "chart: stream.triad.fp64 node[0002" in x)
    bars = line.split(": ")[-1].split(" (")[0]
    assert len(bars) == 9 and bars[4] == "|" and set(bars[5:]) <= set("▁▂▃▄")  # low half

    async def scenario() -> None:
        app = FleetApp(report)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("c")
            assert app.query_one(TabbedContent).active == "section-charts"
            shown = str(app.query_one("#text-charts", Static).render())
            assert "stream.triad.fp64 node[0002,0004] (2 nodes): " + bars in shown
            await pilot.press("q")

    asyncio.run(scenario())


# ------------------------------------------------------------------ the benchmark


def test_the_error_rate_benchmark_prints_its_table(capsys: pytest.CaptureFixture[str]) -> None:
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import change_errors
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    assert change_errors.main(["--smallest"]) == 0
    out = capsys.readouterr().out
    assert "false" in out and "steps missed" in out and "Perfherder" in out
    rows = [line for line in out.splitlines() if line.strip().startswith(("1%", "2%", "3%"))]
    assert len(rows) == 6  # 3 CVs x 2 metric kinds
    assert not math.isnan(float(rows[0].split()[3]))  # alerts, a count


# ------------------------------------------------------------------ gpudiag diff


def test_diff_gives_each_kernel_metric_an_ab_verdict() -> None:
    from gpudiag.diff import diff_snapshots, report_json
    from gpudiag.diff import report_text as diff_text
    from gpudiag.model import KernelResult, ProbeStatus, Snapshot

    rng = random.Random(3)

    def snap(kernels: tuple[KernelResult, ...]) -> Snapshot:
        return Snapshot(host="n", created="2026-11-22T00:00:00Z", gpudiag_version="0",
                        kernels=kernels)  # fmt: skip

    def triad(center: float, n: int, cv: float, device: str = "gpu0") -> KernelResult:
        samples = tuple(rng.gauss(center, center * cv) for _ in range(n))
        return KernelResult("stream", device, "triad", "GB/s", ProbeStatus.OK, samples)

    noisy_a = replace(triad(1, 1, 0, "gpu1"), samples=(3000, 3060, 2940, 3030, 2970))
    noisy_b = replace(noisy_a, samples=(3010, 2950, 3070, 2990, 3040))  # CV 1.6%: 19 a side
    a = snap((triad(3000, 15, 0.01), noisy_a))
    b = snap((triad(2900, 15, 0.01), noisy_b))
    diff = diff_snapshots(a, b)
    slower, noisy = diff.metrics
    assert slower.ab.startswith("different: B is ") and slower.ab.endswith("] slower")
    assert noisy.ab.startswith("inconclusive: about 14 more trials per side would decide a 2%")
    text = diff_text(diff, a, b)
    assert f"      A/B: {slower.ab}\n" in text
    assert report_json(diff)["metrics"][0]["ab"] == slower.ab


# ------------------------------------------------------------------ factors


def test_each_factor_gets_its_share_and_effect_and_confounded_ones_are_said() -> None:
    from gpudiag.fleet.factors import factors

    new = {"nvml.driver_version": "575.57.08", "gpu.0.vbios": "96.00.99.00.01"}
    rolled = HistoryPlant(tuple(f"node{n:04d}" for n in range(1, 61, 3)), 0.97, 1, config=new)
    capped = HistoryPlant(
        tuple(f"node{n:04d}" for n in range(2, 61, 5)),  # a third of them with the new driver
        1.0,
        1,
        config={"gpu.0.power.limit": "500 W"},
    )
    history = history_fleet(60, 1, (rolled, capped), gpus=2)
    found = {f.reading: f for f in factors(history) if f.metric == TRIAD}
    driver = found["nvml.driver_version"]
    # a third of the nodes 3% off, nodes spread by 2% (NODE_CV) and 1% (drift): about
    # 0.0002 / (0.0002 + 0.0004 + 0.0001) of the variance, 0.28
    assert driver.confounded == ("gpu.{gpu}.vbios",) and 0.15 < driver.share < 0.5
    [level] = driver.levels
    assert level.value == "575.57.08" and level.nodes == 20 and level.low < -3.0 < level.high
    assert "confounded with gpu.{gpu}.vbios" in driver.line()
    assert "explains" in driver.line() and "575.57.08 vs 590.48.01: -" in driver.line()
    power = found["gpu.{gpu}.power.limit"]
    assert power.share < driver.share and power.levels[0].low < 0 < power.levels[0].high
    # the copy's explanations hold neither the driver nor the power limit
    assert not [f for f in factors(history) if f.metric == HISTORY_KEYS[1]]


def test_the_fleet_command_takes_slower_compare_and_margin(
    small_history: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpudiag.cli import main

    assert main(["fleet", str(small_history), "--compare", "nvml.driver_version"]) == 3
    err = capsys.readouterr().err
    assert err == "gpudiag: --compare nvml.driver_version: expected KEY=A,B\n"
    args = ["fleet", str(small_history), "--workers", "1", "--format", "text"]
    pair = "nvml.driver_version=590.48.01,575.57.08"
    assert main([*args, "--compare", pair, "--margin", "50", "--slower", "10%"]) == 1
    out = capsys.readouterr().out  # exit 1: two configuration groups (the drivers)
    # a 4% roll-out is under --slower 10; within +-50% the two drivers are the same
    compared = "2 vs 2 nodes; each node's median of its GPUs"
    assert "roll-out" not in out and f"compare {pair} stream.triad.fp64 ({compared}): same" in out
    same = "nvml.driver_version=575.57.08,575.57.08"
    assert main(["fleet", str(small_history), "--compare", same]) == 3
    assert "A and B are the same value" in capsys.readouterr().err


def test_a_compare_with_nothing_to_compare_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Snapshots without kernel results: --compare said nothing at all (the report was the
    one without it, byte for byte); now one line says why there is no verdict."""
    from gpudiag.cli import main
    from gpudiag.snapshot import save

    from fleetgen import base_snapshot

    base = base_snapshot()
    for number in range(1, 5):
        save(replace(base, host=f"node{number}", kernels=()), tmp_path / f"node{number}.json")
    pair = "nvml.driver_version=590.48.01,575.57.08"
    args = ["fleet", str(tmp_path), "--workers", "1", "--format", "text", "--compare", pair]
    main(args)
    out = capsys.readouterr().out
    assert f"compare {pair}: no kernel metric measured on these nodes" in out


def test_figures_without_a_logarithm_are_left_out() -> None:
    history = history_fleet(12, 8, (HistoryPlant(("node0003",), 0.9, 5),), gpus=2)
    for node in ("node0001", "node0002"):
        for run in history.nodes[node]:
            run.values["gpu.0.kernel.stream.triad.fp64"] = math.inf
            run.values["gpu.1.kernel.stream.triad.fp64"] = 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no NaN from an infinite logarithm
        report = history_report(history)
    assert {c.node for c in report.changes} | {n for r in report.roll_outs for n in r.nodes} == {
        "node0003"
    }
    assert report.runs is not None and all(math.isfinite(d.pct) for d in report.runs.drifts)
