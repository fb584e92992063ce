"""`gpudiag goodput` (issue 42): the published figures, the closed form against the
simulation, the planted failure history (rates, lemon node) and what the user sees."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from gpudiag import tomlcompat
from gpudiag.cli import main
from gpudiag.fleet.goodput import (
    HARDWARE_XIDS,
    NodeState,
    RatesError,
    causes_between,
    fleet_rates,
    histories,
    poisson_interval,
)
from gpudiag.fleet.goodput_model import (
    Job,
    ettr,
    ettr_renewal,
    intervals,
    mttf_hours,
    optimal_h,
    p_any_failure,
)
from gpudiag.fleet.goodput_sim import simulate
from gpudiag.fleet.load import load_fleet

from conftest import REPO, run_cli
from fleetgen_failures import failure_states, planted_failures, write_failure_history

META = 6.5  # failures per 1000 node-days (Kokolis et al., Meta)


@pytest.fixture(autouse=True)
def _wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """The text wraps at the terminal's width: these tests read it unwrapped (one sets
    COLUMNS=80 to check the wrapping)."""
    monkeypatch.setenv("COLUMNS", "1000")


def test_databricks_one_percent_a_year() -> None:
    assert round(p_any_failure(0.01, 1024, 30), 3) == 0.569
    assert round(p_any_failure(0.01, 256, 30), 3) == 0.190


def test_meta_mttf_projection() -> None:
    assert round(mttf_hours(Job(16384, META / 1000)), 2) == 1.80
    assert round(mttf_hours(Job(131072, META / 1000)), 3) == 0.225


def test_meta_residual_is_shown() -> None:
    """6.5 per 1000 node-days predicts 1.80 h at 16,384 GPUs and 28.8 h at 1,024, where
    Meta observed 7.9 h: the report sets the model beside each size, gap and all."""
    from gpudiag.fleet.goodput_report import Settings, build

    job = Job(16384, META / 1000)
    settings = Settings(job, 1.0, observed=((1024, 7.9), (16384, 1.8)))
    report = build(META, None, settings, given=True)
    small, large = report["by_job_size"]
    assert round(small["model_mttf_hours"], 1) == 28.8
    assert (small["model_over_observed"], large["model_over_observed"]) == (3.651, 1.002)
    assert any("3.7x at 1024 GPUs, 1x at 16384 GPUs" in note for note in report["notes"])


def test_young_daly_saxena() -> None:
    job = Job(8, 8.0, restart_s=600, write_s=60)  # one node at 8 a day: MTTF 3 h
    assert mttf_hours(job) == pytest.approx(3.0)
    found = {name: round(h * 3600) for name, h in intervals(job).items()}
    assert (found["young"], found["daly"], found["saxena"]) == (1138, 1170, 1231)


def test_optimum_is_the_closed_forms_maximum() -> None:
    job = Job(16384, META / 1000, restart_s=600, write_s=60)
    best = optimal_h(job)
    for factor in (0.8, 0.95, 1.05, 1.25):
        assert ettr(job, best) > ettr(job, best * factor)


def test_issue_example_closed_form_and_simulation_part() -> None:
    """16,384 GPUs, 1 h interval, 10 min restart, 1 min write: 0.620 and about 0.67."""
    job = Job(16384, META / 1000, restart_s=600, write_s=60)
    assert round(ettr(job, 1.0), 3) == 0.620
    sim = simulate(job, 1.0, 200, seed=1)
    assert abs(sim.mean - 0.67) < 0.005
    assert abs(sim.mean - ettr_renewal(job, 1.0)) < 0.003


@pytest.mark.parametrize("gpus", [1024, 2048])
def test_simulation_agrees_where_failures_are_few(gpus: int) -> None:
    job = Job(gpus, META / 1000, restart_s=600, write_s=60)
    interval = optimal_h(job)
    assert job.failures_per_hour * (interval + job.write_h + job.overhead_h) <= 0.1
    sim = simulate(job, interval, 300, seed=7)
    assert abs(sim.mean - ettr(job, interval)) < 0.005


def test_a_long_restart_parts_them_with_few_failures_per_interval() -> None:
    """Few failures per checkpoint interval is not enough: at 16,384 GPUs a 30 min
    restart (lambda u0 = 0.28) parts the first order from the simulation by 0.06."""
    job = Job(16384, META / 1000, restart_s=1800, write_s=30)
    interval = optimal_h(job)
    assert job.failures_per_hour * (interval + job.write_h) < 0.1
    sim = simulate(job, interval, 200, seed=2)
    assert sim.mean - ettr(job, interval) > 0.05
    assert abs(sim.mean - ettr_renewal(job, interval)) < 0.005


def test_spares_save_restarts_in_the_simulation() -> None:
    job = Job(16384, META / 1000, restart_s=600, write_s=60)
    without = simulate(job, 0.25, 100, seed=3)
    spared = simulate(Job(16384, META / 1000, restart_s=600, write_s=60, spares=4), 0.25, 100, 3)
    assert spared.spare_swaps_per_run > 0 and spared.mean > without.mean


def test_lemons_cluster_failures_in_the_simulation() -> None:
    """At one average rate, failures that cluster on lemons (replaced when they fail by a
    node drawn from the fleet) cost less over a run than the same rate spread evenly; a
    lemon share of 0 is the plain simulation, draw for draw."""
    job = Job(2048, META / 1000, restart_s=600, write_s=60)
    even = simulate(job, 0.5, 100, seed=4)
    assert simulate(job, 0.5, 100, seed=4, lemons=(0.0, 5.0)) == even
    clustered = simulate(job, 0.5, 100, seed=4, lemons=(0.05, 5.0))
    assert clustered.failures_per_run < even.failures_per_run
    assert clustered.mean > even.mean


def test_garwood_interval() -> None:
    assert poisson_interval(0) == (0.0, pytest.approx(3.689, abs=1e-3))
    assert poisson_interval(10) == (pytest.approx(4.795, abs=1e-3), pytest.approx(18.390, abs=1e-3))


def test_hardware_xids_are_gpu027s() -> None:
    rules = tomlcompat.loads((REPO / "rules" / "gpu.toml").read_text())["rule"]
    gpu027 = next(r for r in rules if r["id"] == "GPU027")
    assert set(gpu027["expect"]["excludes"]) == HARDWARE_XIDS


def test_planted_rates_and_lemon_in_95_of_100_seeds() -> None:
    """The issue's figure: in 95 of 100 seeds both planted rates lie within their
    intervals and the lemon, and no healthy node, is named. Two independent 95% intervals
    hold together only ~90% of the time (93 of 100 here): the causes' intervals are
    simultaneous (Bonferroni over the causes, exact Poisson), and the report says so."""
    passed = 0
    for seed in range(100):
        planted = planted_failures(seed)
        rates = fleet_rates(failure_states(planted))
        within = all(
            rates.causes[c].low <= planted.fleet_rate(c) <= rates.causes[c].high
            for c in planted.rates
        )
        passed += within and [lemon.node for lemon in rates.lemons] == [planted.lemon]
    assert passed >= 95
    assert rates.cause_confidence == pytest.approx(1 - 0.05 / len(rates.causes))


def test_history_files_load_as_planned(tmp_path: Path) -> None:
    planted = planted_failures(5, nodes=4, days=8, rates={"gpu_lost": 0.2, "xid_hardware": 0.2})
    write_failure_history(tmp_path, planted)
    states = histories(load_fleet([tmp_path], workers=1))
    assert states == failure_states(planted)
    rates = fleet_rates(states)
    for cause in planted.rates:
        expected = sum(day.count(cause) for day in planted.events.values())
        assert rates.causes[cause].count == expected
    assert rates.total.node_days == pytest.approx(4 * 8)


def test_fleet_with_no_time_span(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    planted = planted_failures(5, nodes=2, days=0)
    write_failure_history(tmp_path, planted)
    assert main(["goodput", str(tmp_path), "--workers", "1"]) == 3
    err = capsys.readouterr().err.strip()
    assert "no time span" in err and len(err.splitlines()) == 1
    # --rate is used instead of, or over, the fleet's (it stopped there all the same)
    assert main(["goodput", str(tmp_path), "--workers", "1", "--rate", "6.5"]) == 0
    out = capsys.readouterr()
    assert "no time span" in out.err and "; --rate 6.5 used" in out.err
    assert "6.5 failures per 1000" in out.out


@pytest.mark.parametrize(
    "args",
    [
        ["--rate", "-1"],
        ["--rate", "nan"],
        ["--rate", "6.5", "--gpus", "inf"],
        ["--rate", "6.5", "--checkpoint-interval", "0.5", "--checkpoint-write", "60"],
        [],
    ],
)
def test_bad_input_is_one_line_and_3(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["goodput", *args]) == 3
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err


def test_json_end_to_end() -> None:
    result = run_cli(
        "goodput", "--rate", "6.5", "--gpus", "16384", "--restart", "10",
        "--checkpoint-write", "60", "--checkpoint-interval", "optimal", "--format", "json",
        "--simulate", "50", "--seed", "1",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    for key in ("mttf_hours", "ettr", "ettr_interval", "checkpoint_interval_hours",
                "intervals_hours", "ettr_at_optimal", "rate_per_1000_node_days", "causes",
                "lemon_nodes", "simulated"):  # fmt: skip
        assert key in report
    assert set(report["intervals_hours"]) == {"young", "daly", "saxena", "optimal"}
    # a given rate is a figure, not a measurement: each interval is the point [x, x], the
    # issue's [low, high] keys kept (docs/goodput.md)
    assert report["ettr_interval"] == [report["ettr"]] * 2
    optimal = report["intervals_hours_interval"]["optimal"]
    assert optimal == [report["intervals_hours"]["optimal"]] * 2
    assert report["checkpoint_interval_hours"] == report["intervals_hours"]["optimal"]
    assert report["mttf_hours"] == pytest.approx(1.8029, abs=1e-4)
    assert report["simulated"]["runs"] == 50
    assert math.isclose(report["ettr"], report["ettr_at_optimal"])


def test_text_report_of_a_fleet(capsys: pytest.CaptureFixture[str]) -> None:
    """Rates, lemon, model, what-if and chart, from the plan's states (in process)."""
    from gpudiag.fleet.goodput_report import Settings, build, render

    planted = planted_failures(0)
    rates = fleet_rates(failure_states(planted))
    job = Job(1024, rates.total.per_1000 / 1000)
    report = build(rates.total.per_1000, rates, Settings(job, None, runs=20, seed=1, work_h=48.0))
    text = render(report)
    assert f"lemon node {planted.lemon}" in text
    # the causes' intervals are simultaneous (issue 42's 95 of 100 seeds), and said so
    joint = report["causes_intervals"]
    assert joint["simultaneous"] is True and joint["joint_confidence"] == 0.95
    assert {c["confidence"] for c in report["causes"]} == {joint["each_confidence"]}
    assert "intervals are simultaneous: all 5 hold together at 95%" in text
    assert "lemon nodes drained (1)" in text and "without gpu_lost" in text
    assert "checkpoint interval (log scale)" in text
    assert report["simulated"]["lemons"]["share"] == pytest.approx(1 / 20)
    assert report["simulated"]["lemons"]["factor"] > 3  # planted at 5, measured
    low, high = report["ettr_interval"]
    assert low < report["ettr"] < high
    drained = next(r for r in report["what_if"] if r["what"].startswith("lemon"))
    assert drained["ettr"] > report["ettr"]
    for row in report["what_if"]:
        assert row["ettr_interval"][0] <= row["ettr"] <= row["ettr_interval"][1]


def _state(day: float, **fields: object) -> NodeState:
    start = datetime(2026, 9, 1, tzinfo=timezone.utc)
    return NodeState(start + timedelta(days=day), **fields)  # type: ignore[arg-type]


def test_what_counts_as_an_incident() -> None:
    xid = "faults.xid.79.count"
    before = _state(0, xid=((xid, 1.0),), memory=(("gpu.0.ecc.volatile.uncorrected", 0.0),),
                    link_down=(("ib.mlx5_0.1.link_downed", 3.0),), nvlink_active=144.0,
                    critical=frozenset({("MEM005", "node")}))  # fmt: skip
    assert causes_between(before, replace(before, time=before.time)) == []  # seen again
    assert causes_between(before, replace(before, xid=((xid, 2.0),))) == ["xid_hardware"]
    assert causes_between(before, replace(before, xid=((xid, 0.0),))) == []  # a reboot
    ecc = replace(before, memory=(("gpu.0.ecc.volatile.uncorrected", 1.0),))
    assert causes_between(before, ecc) == ["memory"]
    ib = replace(before, link_down=(("ib.mlx5_0.1.link_downed", 4.0),))
    assert causes_between(before, ib) == ["interconnect"]
    assert causes_between(before, replace(before, nvlink_active=126.0)) == ["interconnect"]
    critical = before.critical | {("GPU001", "gpu.3")}
    assert causes_between(before, replace(before, critical=critical)) == ["drained"]
    lost = replace(before, critical=critical, lost=frozenset({"gpu.3"}))
    assert causes_between(before, lost) == ["gpu_lost"]  # not also drained
    assert causes_between(lost, lost) == []  # still lost: the same incident


def test_long_gaps_are_left_out() -> None:
    xid = "faults.xid.79.count"
    states = {
        "a": [_state(0, xid=((xid, 0.0),)), _state(1, xid=((xid, 1.0),)),
              _state(30, xid=((xid, 5.0),)), _state(31, xid=((xid, 6.0),))],
        "b": [_state(0), _state(1), _state(2)],
    }  # fmt: skip
    rates = fleet_rates(states, max_gap_days=7)
    assert (rates.total.count, rates.total.node_days) == (2, pytest.approx(4.0))
    assert (rates.gaps_left_out, rates.days_left_out) == (1, pytest.approx(29.0))
    with pytest.raises(RatesError):
        fleet_rates({"a": [_state(0), _state(10)]}, max_gap_days=7)


def test_no_failures_is_strict_json(capsys: pytest.CaptureFixture[str]) -> None:
    """A rate of 0: MTTF and the intervals have no figure (null), never Infinity or NaN."""
    args = ["goodput", "--rate", "0", "--checkpoint-interval", "30", "--format", "json"]
    assert main([*args, "--observed", "8:5"]) == 0

    def refuse(name: str) -> None:
        raise AssertionError(name)

    report = json.loads(capsys.readouterr().out, parse_constant=refuse)
    assert report["mttf_hours"] is None and report["intervals_hours"]["optimal"] is None
    assert report["ettr"] == pytest.approx(1 / (1 + 60 / 1800), abs=1e-4)
    assert main(["goodput", "--rate", "0"]) == 3  # no optimum to pick: say so


def test_a_what_if_row_that_never_progresses_is_said_in_its_row(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """At 42 per 1000 node-days the job as asked progresses, but the "detection in 10 min"
    row (10 min restart + 10 min detection, MTTF 17 min) never does: that row says so
    (no optimum), the report stands (it ended, exit 3, blaming the input)."""
    assert main(["goodput", "--rate", "42", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    rows = {row["what"]: row for row in report["what_if"]}
    assert (
        rows["detection in 10 min"]["ettr"] == 0
        and rows["detection in 10 min"]["ettr_at_optimal"] is None
    )
    assert rows["as asked"]["ettr"] > 0.2


def test_an_interval_of_many_mttfs_gives_nothing_done_not_an_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A checkpoint every 10,000,000 min (the option's range allows it): the segment never
    runs through, ETTR 0 (math.expm1 overflowed: an internal error)."""
    args = ["goodput", "--rate", "6.5", "--checkpoint-interval", "10000000", "--format", "json"]
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out)["ettr"] == 0


def test_one_incident_in_a_small_fleet_is_no_lemon() -> None:
    """Four nodes, one incident on g3 and none elsewhere: against the rest's rate (0) it
    was a lemon at p = 0; under one rate for all it is a quarter's chance (x 4 nodes)."""
    from gpudiag.fleet.goodput import find_lemons

    days = 3.0
    assert find_lemons({"g1": (0, days), "g2": (0, days), "g3": (1, days), "g4": (0, days)}) == []
    fleet = {f"n{i:02d}": (i % 2, 30.0) for i in range(20)}  # 10 incidents over 19 nodes
    fleet["n07"] = (9, 30.0)
    assert [lemon.node for lemon in find_lemons(fleet)] == ["n07"]


def test_with_spares_the_closed_form_is_not_set_beside_the_simulation(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The closed form has no spares; the simulation runs them out and repairs them: with
    --spares there is no "off by" (it said -0.030 where the two differ by far more)."""
    args = ["goodput", "--rate", "6.5", "--spares", "4", "--simulate", "20", "--seed", "1"]
    assert main([*args, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["simulated"]["closed_form_off_by"] is None
    assert main(args) == 0
    assert "the closed form has no spares to compare" in capsys.readouterr().out


def test_with_spares_each_figure_says_what_it_models(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--spares K: the headline E[ETTR] is the closed form, which has no spares, and says
    so; the "as asked" row is the same figure (it was the spares' upper bound, restart 0);
    only the spares row is that upper bound, labelled; without --simulate the text says
    that only the simulation models spares and how to get it."""
    assert main(["goodput", "--rate", "6.5", "--spares", "4", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    asked = report["what_if"][0]
    assert asked["what"] == "as asked" and asked["ettr"] == report["ettr"]
    assert "no spares" in report["ettr_model"] and "no spares" in asked["model"]
    spares = next(r for r in report["what_if"] if "hot spares" in r["what"])
    assert "upper bound" in spares["model"] and spares["ettr"] > report["ettr"]
    assert report["ettr_spares_upper_bound"] == spares["ettr"]
    assert main(["goodput", "--rate", "6.5", "--spares", "4"]) == 0
    text = capsys.readouterr().out
    assert "closed form, no spares" in text
    assert "only the simulation models the 4 spares: --simulate RUNS" in text
    assert "4 hot spares (upper bound)" in text


def test_a_free_checkpoint_write_has_an_optimum(capsys: pytest.CaptureFixture[str]) -> None:
    """--checkpoint-write 0: the closed form 1 - lambda (u0 + dt/2) is best as dt -> 0
    (checkpoint continuously), E[ETTR] 1 - lambda u0 at the limit; it was an empty
    optimum ('optimal - min', ETTR at the optimum '-') and, with 'optimal', exit 3."""
    job = Job(16384, META / 1000, restart_s=600.0, write_s=0.0)
    assert optimal_h(job) == 0.0
    assert ettr(job, 0.0) == pytest.approx(1 - job.failures_per_hour * job.overhead_h)
    assert ettr_renewal(job, 0.0) == pytest.approx(1 / (1 + job.failures_per_hour * job.overhead_h))
    assert main(["goodput", "--rate", "6.5", "--checkpoint-write", "0", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["intervals_hours"]["optimal"] == 0.0 == report["checkpoint_interval_hours"]
    assert report["ettr"] == report["ettr_at_optimal"] == pytest.approx(ettr(job, 0.0), abs=1e-4)
    assert len(report["curve"]) > 1 and all(p["interval_hours"] > 0 for p in report["curve"])
    assert main(["goodput", "--rate", "6.5", "--checkpoint-write", "0", "--checkpoint-interval",
                 "30"]) == 0  # fmt: skip
    assert "optimal 0.0 min; E[ETTR] at the optimum 0.908" in capsys.readouterr().out
    assert main(["goodput", "--rate", "6.5", "--checkpoint-write", "0"]) == 0
    assert "checkpoint continuously (write 0 s" in capsys.readouterr().out
    # a simulation needs an interval above 0: one line, exit 3
    assert main(["goodput", "--rate", "6.5", "--checkpoint-write", "0", "--simulate", "5"]) == 3
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--checkpoint-interval" in err


def test_text_fits_80_columns(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """At COLUMNS=80 no line is wider than 80 (prose wraps, the what-if table wraps its
    first column); a fleet's report too (long times, lemon lines), wrapped at 80."""
    from gpudiag.fleet.goodput_report import Settings, build
    from gpudiag.fleet.goodput_text import render

    monkeypatch.setenv("COLUMNS", "80")
    args = ["goodput", "--rate", "6.5", "--spares", "2", "--simulate", "5", "--seed", "1",
            "--observed", "1024:7.9", "--observed", "16384:1.8"]  # fmt: skip
    assert main(args) == 0
    text = capsys.readouterr().out
    assert max(map(len, text.splitlines())) <= 80 and "2 hot spares (upper" in text
    planted = planted_failures(0)
    rates = fleet_rates(failure_states(planted))
    job = Job(1024, rates.total.per_1000 / 1000)
    report = build(rates.total.per_1000, rates, Settings(job, None, runs=5, seed=1, work_h=48.0))
    wide, narrow = render(report), render(report, width=80)
    assert max(map(len, wide.splitlines())) > 80 >= max(map(len, narrow.splitlines()))
    assert sorted(wide.split()) == sorted(narrow.split())  # wrapped, every word kept


def test_the_first_order_note_asks_for_a_simulation_only_where_none_ran(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Without --simulate there is no simulation to trust: the note says how to get one."""
    assert main(["goodput", "--rate", "6.5"]) == 0
    out = capsys.readouterr().out
    assert "--simulate N gives the figure" in out and "trust the simulation" not in out
    assert main(["goodput", "--rate", "6.5", "--simulate", "20", "--seed", "1"]) == 0
    assert "trust the simulation" in capsys.readouterr().out


def test_a_dataset_and_its_url_give_the_snapshots_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """goodput reads what `fleet --dataset` wrote, as a folder and as a file:// URL, as
    `fleet` reads it (one loader): the same report as from the snapshots (review #5)."""
    from gpudiag.fleet.dataset import append_dataset

    planted = planted_failures(5, nodes=3, days=4, rates={"gpu_lost": 0.3, "xid_hardware": 0.3})
    files = tmp_path / "files"
    files.mkdir()
    write_failure_history(files, planted)
    dataset = tmp_path / "ds"
    append_dataset(load_fleet([files], workers=1), str(dataset))
    reports = []
    for path in (str(files), str(dataset), dataset.as_uri()):
        assert main(["goodput", path, "--gpus", "64", "--format", "json", "--workers", "1"]) == 0
        out = capsys.readouterr()
        assert out.err == ""
        reports.append(json.loads(out.out))
    assert reports[0]["rate_per_1000_node_days"] > 0
    assert reports[1] == reports[0] and reports[2] == reports[0]


def test_a_job_takes_whole_nodes_and_a_given_rate_has_no_interval(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """7 GPUs on 8-GPU nodes take one node (its whole rate), said so; with --rate there is
    no interval to print: no empty '(1.803-1.803)' ranges; in JSON each interval is the
    point [x, x] (review #13; the issue's `ettr_interval` is [low, high])."""
    assert main(["goodput", "--rate", "6.5", "--gpus", "7"]) == 0
    text = capsys.readouterr().out
    assert "7 GPUs (1 node of 8 GPUs: a job takes whole nodes)" in text
    assert "MTTF 3692.308 h\n" in text  # 24 h / (1 node x 6.5 / 1000)
    assert "interval" not in text.split("What if")[1].split("ETTR against")[0]
    for line in text.splitlines():
        for low, high in re.findall(r"(\d[\d.]*)-(\d[\d.]*)", line):
            assert low != high, line  # no empty range
    assert main(["goodput", "--rate", "6.5", "--gpus", "7", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["nodes"] == 1 and report["mttf_hours"] == pytest.approx(24 / 0.0065, abs=1e-3)
    assert report["mttf_interval"] == [report["mttf_hours"]] * 2
    assert report["rate_interval"] == [6.5, 6.5]
    assert all(row["ettr_interval"] == [row["ettr"]] * 2 for row in report["what_if"])
