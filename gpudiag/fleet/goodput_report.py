"""`gpudiag goodput`'s report: the rates (goodput.py), the model (goodput_model.py), the
simulation (goodput_sim.py) and the what-if rows, as one dictionary (the JSON); as text
or markdown, with tables and an ASCII chart, by goodput_text.render."""

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
from gpudiag.fleet.goodput_text import render

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
        # a given rate (--rate) is a figure, no measurement: every interval is the point
        # [x, x] (the keys keep their one type; the text prints no interval for a point)
        "rate_interval": [round(low_rate, 4), round(high_rate, 4)],
        "gpus": job.gpus,
        "gpus_per_node": job.gpus_per_node,
        "nodes": job.nodes,  # whole nodes: GPUs / GPUs per node, rounded up
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
                "model_interval": None if low == high else [_round(low), _round(high)],
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
        interval = [_round(ettr(closed, chosen))] * 2  # a given rate: the point
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


def fleet_text(loaded: LoadedFleet) -> str:
    """`gpudiag goodput PATH...`'s text at its defaults on a loaded fleet's own history
    (the fleet screen's goodput tab), or one line saying why there is none."""
    try:
        fleet = fleet_rates(histories(loaded))
        rate = fleet.total.per_1000
        job = Job(DEFAULT_GPUS, rate / 1000.0)  # the rest at Job's defaults, the command's
        return render(build(rate, fleet, Settings(job, None)))  # the screen wraps it
    except (RatesError, ModelError) as exc:
        return f"no goodput report: {exc}"
