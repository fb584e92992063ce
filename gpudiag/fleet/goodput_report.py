"""`gpudiag goodput`'s report: the rates (goodput.py), the model (goodput_model.py), the
simulation (goodput_sim.py) and the what-if rows, as one dictionary (the JSON) and as
text or markdown with a table and an ASCII chart (drawn here: no plotting library)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from gpudiag.fleet.goodput import (
    CAUSE_TITLES,
    CAUSES,
    CONFIDENCE,
    FleetRates,
    Rate,
    RatesError,
    fleet_rates,
    histories,
)
from gpudiag.fleet.goodput_model import (
    DEFAULT_GPUS,
    DEFAULT_JOB_DAYS,
    DEFAULT_REPAIR_H,
    Job,
    ModelError,
    ettr,
    ettr_renewal,
    interval_grid,
    intervals,
    mttf_hours,
    optimal_h,
)
from gpudiag.fleet.goodput_sim import simulate

if TYPE_CHECKING:
    from gpudiag.fleet.records import LoadedFleet

DETECT_FAST_S, DETECT_SLOW_S = 30.0, 600.0  # ByteRobust: NIC faults in 30 s, not 10 min
DEFAULT_SPARES = 4
# failures per (checkpoint interval + write + restart) under which the closed form and
# the simulation agreed within 0.005 in 138 cases of 1,000 runs each (256 to 16,384 GPUs,
# 5 to 30 min restarts, 30 s to 5 min writes, 6.5 per 1000 node-days: at most 0.0040)
FIRST_ORDER_LOAD = 0.1


@dataclass(frozen=True)
class Settings:
    """What the command line asked: the job, the interval (None: optimal), the
    simulation's runs (0: none), its seed, work and repair time."""

    job: Job
    interval_h: float | None
    runs: int = 0
    seed: int = 0
    work_h: float = DEFAULT_JOB_DAYS * 24.0
    repair_h: float = DEFAULT_REPAIR_H
    observed: tuple[tuple[int, float], ...] = ()  # (GPUs, MTTF hours) seen in jobs


def _round(value: float, digits: int = 4) -> float | None:
    return None if not math.isfinite(value) else round(value, digits)


def _interval(job: Job, settings: Settings) -> float:
    chosen = optimal_h(job) if settings.interval_h is None else settings.interval_h
    if not math.isfinite(chosen):
        raise ModelError("no failures: every interval is as good; give --checkpoint-interval MIN")
    return chosen


def _interval_at(job: Job, name: str) -> float | None:
    """One checkpoint interval at an end of the rate's interval; None where the model
    has none there (a restart longer than the MTTF)."""
    try:
        return _round(intervals(job)[name], 5)
    except ModelError:
        return None


def _rate_json(rate: Rate) -> dict[str, Any]:
    return {
        "count": rate.count,
        "node_days": round(rate.node_days, 3),
        "per_1000_node_days": round(rate.per_1000, 4),
        "interval": [round(rate.low, 4), round(rate.high, 4)],
        "confidence": round(rate.confidence, 4),
    }


def _with_rate(job: Job, per_1000: float) -> Job:
    return replace(job, rate_per_node_day=per_1000 / 1000.0)


def build(
    rate_per_1000: float, fleet: FleetRates | None, settings: Settings, given: bool = False
) -> dict[str, Any]:
    """The report as a dictionary (`--format json`); `rate_per_1000` is the rate used:
    the fleet's, or --rate's (`given`: its interval is then the figure itself)."""
    job = _with_rate(settings.job, rate_per_1000)
    chosen = _interval(job, settings)
    if chosen < job.write_h:
        raise ModelError("the checkpoint interval is shorter than the checkpoint write")
    if settings.runs and chosen == 0:
        raise ModelError(
            "a checkpoint write of 0 s is best taken continuously (an interval of 0), which "
            "a simulation cannot run: give --checkpoint-interval MIN with --simulate"
        )
    given = fleet is None or given
    low_rate = high_rate = rate_per_1000
    if fleet is not None and not given:
        low_rate, high_rate = fleet.total.low, fleet.total.high
    at_low, at_high = _with_rate(job, low_rate), _with_rate(job, high_rate)
    found = intervals(job)
    value = ettr(job, chosen)
    renewal = ettr_renewal(job, chosen)
    out: dict[str, Any] = {
        "rate_per_1000_node_days": round(rate_per_1000, 4),
        "rate_source": "given (--rate)" if given else "the fleet's history",
        "rate_interval": [round(low_rate, 4), round(high_rate, 4)],
        "gpus": job.gpus,
        "gpus_per_node": job.gpus_per_node,
        "restart_s": job.restart_s,
        "checkpoint_write_s": job.write_s,
        "detect_s": job.detect_s,
        "mttf_hours": _round(mttf_hours(job)),
        "mttf_interval": [_round(mttf_hours(at_high)), _round(mttf_hours(at_low))],
        "checkpoint_interval_hours": _round(chosen, 5),
        "failures_per_interval": _round(job.failures_per_hour * (chosen + job.write_h)),
        # the closed form's first order holds where this is small (restarts included: a
        # 30 min restart at 16,384 GPUs parts them by 0.06 at 0.08 failures per interval)
        "failures_per_interval_and_restart": _round(
            job.failures_per_hour * (chosen + job.write_h + job.overhead_h)
        ),
        "ettr": _round(value),
        # what the headline models: the closed form has no spares, whatever --spares says
        "ettr_model": "Meta's closed form, no spares"
        + (f" (only the simulation models the {job.spares} spares)" if job.spares else ""),
        # spares that never run out: a failure costs detection, no restart (at most this)
        "ettr_spares_upper_bound": _round(ettr(replace(job, restart_s=0.0), chosen))
        if job.spares
        else None,
        "ettr_interval": [_round(ettr(at_high, chosen)), _round(ettr(at_low, chosen))],
        "intervals_hours": {name: _round(h, 5) for name, h in found.items()},
        "intervals_hours_interval": {
            name: [_interval_at(at_high, name), _interval_at(at_low, name)] for name in found
        },
        "ettr_at_optimal": _round(ettr(job, found["optimal"]))
        if math.isfinite(found["optimal"])
        else None,
        "ettr_renewal": _round(renewal),
        "first_order_off_by": _round(value - renewal),
        "simulated": None,
        "causes": [],
        "causes_intervals": None,
        "lemon_nodes": [],
        "fleet": None,
        "what_if": [],
        "curve": [],
        "notes": [],
        "by_job_size": _by_job_size(job, at_low, at_high, settings.observed),
    }
    if settings.runs:
        mix = lemon_mix(fleet)
        sim = simulate(
            job,
            chosen,
            settings.runs,
            settings.seed,
            settings.work_h,
            settings.repair_h,
            lemons=mix,
        )
        out["simulated"] = {
            "runs": sim.runs,
            "seed": sim.seed,
            "mean_ettr": round(sim.mean, 4),
            "interval": [round(sim.low, 4), round(sim.high, 4)],
            # like with like only: the closed form has no spares (nor their repairs), the
            # simulation runs them out; with spares there is no figure to set beside it
            "closed_form_off_by": None if job.spares else round(value - sim.mean, 4),
            "spares": job.spares,
            "failures_per_run": round(sim.failures_per_run, 2),
            "spare_swaps_per_run": round(sim.spare_swaps_per_run, 2),
            "work_hours": settings.work_h,
            "repair_hours": settings.repair_h,
            "lemons": None
            if mix is None
            else {"share": round(mix[0], 4), "factor": round(mix[1], 3)},
        }
    if fleet is not None:
        _fleet_part(out, fleet)
    out["what_if"] = _what_if(job, chosen, rate_per_1000, fleet, settings)
    out["curve"] = [
        {
            "interval_hours": round(h, 5),
            "ettr": _round(ettr(job, h)),
            "renewal": _round(ettr_renewal(job, h)),
        }
        for h in interval_grid(job, _grid_centre(job, found["optimal"], chosen))
    ]
    sizes = out["by_job_size"]
    missed = [r for r in sizes if r["explained"] is False]
    if missed:
        out["notes"].append(
            "outside the model's MTTF interval: "
            + "; ".join(
                f"at {r['gpus']} GPUs the model predicts {r['model_mttf_hours']:.3g} h where "
                f"{r['observed_mttf_hours']:g} h was observed"
                for r in missed
            )
        )
    if len(sizes) > 1:
        out["notes"].append(
            "one constant rate makes MTTF inversely proportional to job size, so model / "
            "observed would be alike at every size; it is "
            + ", ".join(f"{r['model_over_observed']:.2g}x at {r['gpus']} GPUs" for r in sizes)
        )
    load = out["failures_per_interval_and_restart"]
    if load and load > FIRST_ORDER_LOAD:
        out["notes"].append(
            f"{load:.2f} failures per checkpoint interval and restart: above "
            f"{FIRST_ORDER_LOAD:g} the first-order closed form is off (by {value - renewal:+.3f} "
            "against the same assumptions without the first-order cut); "
            + ("trust the simulation" if settings.runs else "--simulate N gives the figure")
        )
    return out


def _grid_centre(job: Job, optimal: float, chosen: float) -> float:
    """Where the ETTR curve centres: the optimum, else the interval asked; where both are 0
    (a free write: the optimum is to checkpoint continuously) a tenth of the MTTF."""
    for centre in (optimal, chosen):
        if math.isfinite(centre) and centre > 0:
            return centre
    return mttf_hours(job) / 10


def _by_job_size(
    job: Job, at_low: Job, at_high: Job, observed: tuple[tuple[int, float], ...]
) -> list[dict[str, Any]]:
    """The model's MTTF beside jobs' observed MTTF by size (--observed): where one
    constant rate cannot explain every size, the gap shows (Meta's residual)."""
    out = []
    for gpus, hours in observed:
        model = mttf_hours(replace(job, gpus=gpus))
        low, high = mttf_hours(replace(at_high, gpus=gpus)), mttf_hours(replace(at_low, gpus=gpus))
        out.append(
            {
                "gpus": gpus,
                "observed_mttf_hours": hours,
                "model_mttf_hours": _round(model),
                "model_interval": [_round(low), _round(high)],
                "model_over_observed": _round(model / hours, 3),
                # inside the model's interval; None where the rate was given (no interval)
                "explained": None if low == high else bool(low <= hours <= high),
            }
        )
    return out


def _fleet_part(out: dict[str, Any], fleet: FleetRates) -> None:
    total = fleet.total.count or 1
    out["causes"] = [
        {
            "cause": cause,
            "title": CAUSE_TITLES[cause],
            **_rate_json(fleet.causes[cause]),
            "share": round(fleet.causes[cause].count / total, 4),
        }
        for cause in CAUSES
    ]
    out["causes_intervals"] = {
        # a reader compares the causes: their intervals hold together, not one by one
        "simultaneous": True,
        "joint_confidence": CONFIDENCE,
        "each_confidence": round(fleet.cause_confidence, 4),
        "method": f"Bonferroni over the {len(CAUSES)} causes, exact (Garwood) Poisson",
    }
    out["lemon_nodes"] = [
        {
            "node": lemon.node,
            "count": lemon.count,
            "expected": round(lemon.expected, 3),
            "node_days": round(lemon.node_days, 3),
            "p_adjusted": float(f"{lemon.p_adjusted:.3g}"),
        }
        for lemon in fleet.lemons
    ]
    out["fleet"] = {
        "nodes": fleet.nodes,
        "snapshots": fleet.snapshots,
        "first": fleet.first,
        "last": fleet.last,
        "total": _rate_json(fleet.total),
        "max_gap_days": fleet.max_gap_days,
        "gaps_left_out": fleet.gaps_left_out,
        "days_left_out": round(fleet.days_left_out, 3),
        "dispersion": None
        if fleet.dispersion is None
        else {
            "chi_square": round(fleet.dispersion[0], 3),
            "df": fleet.dispersion[1],
            "p": float(f"{fleet.dispersion[2]:.3g}"),
        },
    }
    notes = out["notes"]
    if fleet.gaps_left_out:
        notes.append(
            f"{fleet.gaps_left_out} gaps longer than {fleet.max_gap_days:g} days "
            f"({fleet.days_left_out:.1f} node-days) left out: neither their time nor their "
            "incidents count"
        )
    if fleet.dispersion is not None and fleet.dispersion[2] < 0.01:
        notes.append(
            "one constant rate does not explain the nodes (lemons left out): chi-square "
            f"{fleet.dispersion[0]:.1f} on {fleet.dispersion[1]} df, "
            f"p = {fleet.dispersion[2]:.2g}; "
            "the model's single rate understates the spread"
        )
    if not out["by_job_size"]:
        notes.append(
            "snapshots hold no job records: give the MTTF jobs saw by size (--observed "
            "GPUS:HOURS) to set the model's beside it (Meta's residual)"
        )


def lemon_mix(fleet: FleetRates | None, cause: str | None = None) -> tuple[float, float] | None:
    """The lemon nodes' share of the fleet's observed nodes and how many times the rest's
    rate they fail (without `cause`), for the simulation; None without lemons, or where
    the rest had no incident (no factor to give)."""
    if fleet is None or not fleet.lemons:
        return None
    names = {lemon.node for lemon in fleet.lemons}
    observed = [n for n, (_, days) in fleet.per_node.items() if days > 0]

    def rate(nodes: set[str]) -> float:
        count = sum(
            fleet.per_node[n][0] - fleet.per_node_causes[n].get(cause or "", 0) for n in nodes
        )
        return count / sum(fleet.per_node[n][1] for n in nodes)

    rest = rate(set(observed) - names)
    if rest <= 0:
        return None
    return len(names) / len(observed), max(1.0, rate(names) / rest)


def _what_if(
    job: Job, chosen: float, rate: float, fleet: FleetRates | None, settings: Settings
) -> list[dict[str, Any]]:
    measured = fleet is not None and fleet.total.count > 0
    scale = rate / fleet.total.per_1000 if measured else 1.0  # type: ignore[union-attr]
    total = fleet.total if measured else None  # type: ignore[union-attr]
    mix = lemon_mix(fleet)
    # (what, the job, the rate measured for it or None where given, its lemons)
    rows: list[tuple[str, Job, Rate | None, tuple[float, float] | None]] = [
        ("as asked", job, total, mix)
    ]
    if measured:
        assert fleet is not None
        if fleet.lemons:
            names = [lemon.node for lemon in fleet.lemons]
            drained = fleet.without(names)
            rows.append(
                (
                    f"lemon nodes drained ({len(names)})",
                    _with_rate(job, drained.per_1000 * scale),
                    drained,
                    None,
                )
            )
        for cause in CAUSES:
            if fleet.causes[cause].count:
                left = fleet.without(cause=cause)
                row = _with_rate(job, left.per_1000 * scale)
                rows.append((f"without {cause}", row, left, lemon_mix(fleet, cause)))
    spares = job.spares or DEFAULT_SPARES
    for name, row in (
        (f"detection in {DETECT_FAST_S:g} s", replace(job, detect_s=DETECT_FAST_S)),
        (f"detection in {DETECT_SLOW_S / 60:g} min", replace(job, detect_s=DETECT_SLOW_S)),
        (f"{spares} hot spares (upper bound)", replace(job, spares=spares)),
    ):
        rows.append((name, row, total, mix))
    out = []
    no_spares = "closed form, no spares" if job.spares else "closed form"
    for name, row, measured_rate, lemons in rows:
        # the closed form has no spares: in every row but the spares' it models none (the
        # simulation runs the row's spares out); in the spares' row they never run out, a
        # failure costs detection and no restart: an upper bound
        bound = name.endswith("(upper bound)")
        closed = replace(row, restart_s=0.0) if bound else row
        interval = [_round(ettr(closed, chosen))] * 2
        if measured_rate is not None and measured_rate.per_1000 > 0:
            factor = row.rate_per_node_day * 1000 / measured_rate.per_1000
            interval = [
                _round(ettr(_with_rate(closed, measured_rate.high * factor), chosen)),
                _round(ettr(_with_rate(closed, measured_rate.low * factor), chosen)),
            ]
        try:
            best = optimal_h(closed)
        except ModelError:  # this row's job never makes progress: said in its row, not fatal
            best = math.nan
        entry: dict[str, Any] = {
            "what": name,
            "rate_per_1000_node_days": round(row.rate_per_node_day * 1000, 4),
            "mttf_hours": _round(mttf_hours(row)),
            "ettr": _round(ettr(closed, chosen)),
            "ettr_interval": interval,
            "ettr_at_optimal": _round(ettr(closed, best)) if math.isfinite(best) else None,
            "model": "closed form, spares never run out (no restart): an upper bound"
            if bound
            else no_spares,
            "simulated": None,
        }
        if settings.runs and math.isfinite(best):
            sim = simulate(
                row,
                chosen,
                settings.runs,
                settings.seed,
                settings.work_h,
                settings.repair_h,
                lemons=lemons,
            )
            entry["simulated"] = round(sim.mean, 4)
        out.append(entry)
    return out


# ------------------------------------------------------------------ text


def _f(value: Any, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def chart(curve: list[dict[str, Any]], width: int = 52, height: int = 10) -> list[str]:
    """ETTR against the checkpoint interval (log scale), in characters."""
    points = [(p["interval_hours"], p["ettr"]) for p in curve if p["ettr"] is not None]
    if len(points) < 2:
        return []
    xs = [math.log(x) for x, _ in points]
    ys = [y for _, y in points]
    low, high = min(ys), max(ys)
    if high - low < 1e-9:
        high = low + 1e-3
    grid = [[" "] * width for _ in range(height)]
    for x, y in zip(xs, ys, strict=True):
        col = round((x - xs[0]) / (xs[-1] - xs[0]) * (width - 1))
        row = round((high - y) / (high - low) * (height - 1))
        grid[row][col] = "*"
    lines = []
    for i, cells in enumerate(grid):
        label = high - (high - low) * i / (height - 1)
        lines.append(f"{label:6.3f} |{''.join(cells)}".rstrip())
    lines.append(" " * 7 + "+" + "-" * width)
    left, right = f"{points[0][0] * 60:.1f} min", f"{points[-1][0] * 60:.1f} min"
    lines.append(" " * 8 + left + " " * max(1, width - len(left) - len(right)) + right)
    lines.append(" " * 8 + "checkpoint interval (log scale); ETTR, closed form")
    return lines


def render(report: dict[str, Any], markdown: bool = False) -> str:
    """The report as text, or markdown."""
    head = "## " if markdown else ""
    lines: list[str] = []
    fleet = report["fleet"]
    lines.append(f"{head}Failure rates")
    if fleet is not None:
        total = fleet["total"]
        lines.append(
            f"{fleet['nodes']} nodes, {fleet['snapshots']} snapshots from {fleet['first']} to "
            f"{fleet['last']}: {total['count']} incidents in {total['node_days']:.1f} node-days "
            f"observed (gaps over {fleet['max_gap_days']:g} days left out: "
            f"{fleet['gaps_left_out']})"
        )
        lines.append("")
        joint = report["causes_intervals"]
        lines += _table(
            ["cause", "incidents", "per 1000 node-days", "joint 95% interval", "share"],
            [
                [c["cause"], str(c["count"]), f"{c['per_1000_node_days']:.2f}",
                 f"{c['interval'][0]:.2f}-{c['interval'][1]:.2f}", f"{c['share']:.0%}"]
                for c in report["causes"]
            ]
            + [["total", str(total["count"]), f"{total['per_1000_node_days']:.2f}",
                f"{total['interval'][0]:.2f}-{total['interval'][1]:.2f}", ""]],
            markdown,
        )  # fmt: skip
        lines.append(
            f"the causes' intervals are simultaneous: all {len(report['causes'])} hold together "
            f"at {joint['joint_confidence']:.0%} ({joint['method']}, each at "
            f"{joint['each_confidence']:.0%}); the total's alone at {total['confidence']:.0%}"
        )
        lines.append("")
        if report["lemon_nodes"]:
            for lemon in report["lemon_nodes"]:
                lines.append(
                    f"lemon node {lemon['node']}: {lemon['count']} incidents where the rest of the "
                    f"fleet's rate expects {lemon['expected']:.2f} (p = {lemon['p_adjusted']:.2g}, "
                    "corrected for the number of nodes)"
                )
        else:
            lines.append("no lemon node (none improbable at p < 0.01 after correction)")
    else:
        lines.append(f"given: {report['rate_per_1000_node_days']:g} failures per 1000 node-days")
    lines.append("")
    lines.append(f"{head}The job")
    lines.append(
        f"{report['gpus']} GPUs ({report['gpus'] / report['gpus_per_node']:g} nodes) at "
        f"{report['rate_per_1000_node_days']:.2f} per 1000 node-days: MTTF "
        f"{_f(report['mttf_hours'])} h "
        f"({_f(report['mttf_interval'][0])}-{_f(report['mttf_interval'][1])})"
    )
    chosen = report["checkpoint_interval_hours"]
    lines.append(
        ("checkpoint continuously" if chosen == 0 else f"checkpoint every {chosen * 60:.1f} min")
        + f" (write {report['checkpoint_write_s']:g} s, "
        "restart "
        f"{report['restart_s'] / 60:g} min, detection {report['detect_s']:g} s): E[ETTR] "
        f"{_f(report['ettr'])} "
        f"({_f(report['ettr_interval'][0])}-{_f(report['ettr_interval'][1])}), "
        + ("closed form, no spares" if report["ettr_spares_upper_bound"] is not None
           else "closed form")
    )  # fmt: skip
    bound = report["ettr_spares_upper_bound"]
    if bound is not None:
        spares = report["what_if"][-1]["what"].split()[0]
        lines.append(
            f"with {spares} hot spares that never run out (no restart): at most {_f(bound)}, "
            "closed form; "
            + (
                f"only the simulation models the {spares} spares and their repair (below)"
                if report["simulated"] is not None
                else f"only the simulation models the {spares} spares: --simulate RUNS"
            )
        )
    iv = report["intervals_hours"]
    lines.append(
        "intervals: "
        + ", ".join(
            f"{name} {_f(None if iv[name] is None else iv[name] * 60, 1)} min" for name in iv
        )
        + f"; E[ETTR] at the optimum {_f(report['ettr_at_optimal'])}"
    )
    lines.append(
        f"without the first-order cut (same assumptions): {_f(report['ettr_renewal'])}; "
        f"the closed form is off by {report['first_order_off_by']:+.3f}"
    )
    sim = report["simulated"]
    if sim is not None:
        lemons = sim["lemons"]
        clustered = (
            ""
            if lemons is None
            else f", lemon nodes {lemons['share']:.1%} of the fleet at {lemons['factor']:.1f}x "
            "the rest's rate, replaced when they fail"
        )
        spared = (
            f", {sim['spares']} hot spares back {sim['repair_hours']:g} h after a failure"
            if sim["spares"]
            else ""
        )
        lines.append(
            f"simulated ({sim['runs']} runs of {sim['work_hours'] / 24:g} days' work, seed "
            f"{sim['seed']}{clustered}{spared}): {sim['mean_ettr']:.3f} "
            f"({sim['interval'][0]:.3f}-{sim['interval'][1]:.3f}); "
            + (
                f"the closed form is off by {sim['closed_form_off_by']:+.3f}"
                if sim["closed_form_off_by"] is not None
                else "the closed form has no spares to compare (its spares row never runs "
                "out of them: an upper bound)"
            )
        )
    lines.append("")
    lines.append(f"{head}What if")
    simulated = sim is not None
    header = ["what", "per 1000 node-days", "MTTF h", "ETTR", "95% interval", "ETTR at optimum"]
    rows = [
        [r["what"], f"{r['rate_per_1000_node_days']:.2f}", _f(r["mttf_hours"], 2), _f(r["ettr"]),
         f"{_f(r['ettr_interval'][0])}-{_f(r['ettr_interval'][1])}",
         _f(r["ettr_at_optimal"])] + ([_f(r["simulated"])] if simulated else [])
        for r in report["what_if"]
    ]  # fmt: skip
    lines += _table(header + (["simulated"] if simulated else []), rows, markdown)
    lines.append("")
    lines.append(f"{head}ETTR against the checkpoint interval")
    lines += _table(
        ["interval min", "ETTR (closed form)", "without first-order cut"],
        [
            [f"{p['interval_hours'] * 60:.1f}", _f(p["ettr"]), _f(p["renewal"])]
            for p in report["curve"]
        ],
        markdown,
    )
    drawn = chart(report["curve"])
    if drawn:
        lines.append("")
        lines += ["```", *drawn, "```"] if markdown else drawn
    if report["by_job_size"]:
        lines.append("")
        lines.append(f"{head}The model against jobs observed")
        lines += _table(
            ["GPUs", "observed MTTF h", "model MTTF h", "model interval", "model / observed"],
            [
                [str(r["gpus"]), f"{r['observed_mttf_hours']:g}", _f(r["model_mttf_hours"], 2),
                 f"{_f(r['model_interval'][0], 2)}-{_f(r['model_interval'][1], 2)}",
                 _f(r["model_over_observed"], 2)]
                for r in report["by_job_size"]
            ],
            markdown,
        )  # fmt: skip
    if report["notes"]:
        lines.append("")
        lines += [f"- {note}" if markdown else f"note: {note}" for note in report["notes"]]
    return "\n".join(lines) + "\n"


def fleet_text(loaded: LoadedFleet) -> str:
    """`gpudiag goodput PATH...`'s text at its defaults on a loaded fleet's own history
    (the fleet screen's goodput tab), or one line saying why there is none."""
    try:
        fleet = fleet_rates(histories(loaded))
        rate = fleet.total.per_1000
        job = Job(DEFAULT_GPUS, rate / 1000.0)  # the rest at Job's defaults, the command's
        return render(build(rate, fleet, Settings(job, None)))
    except (RatesError, ModelError) as exc:
        return f"no goodput report: {exc}"


def _table(header: list[str], rows: list[list[str]], markdown: bool) -> list[str]:
    if markdown:
        out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        return out + ["| " + " | ".join(row) + " |" for row in rows]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    return [
        "  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]
