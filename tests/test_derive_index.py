"""Re-deriving a snapshot hands the new snapshot its index of readings
(`Snapshot.with_probes`) instead of a pass over every reading: the index must be the one
a snapshot of those results builds itself, key for key and in order, whether the
snapshot held no derived result, a stale one, or nothing is derived."""

from __future__ import annotations

from dataclasses import replace

from gpudiag.derive import DERIVED, with_derived
from gpudiag.model import ProbeResult, ProbeStatus, Reading, Snapshot
from gpudiag.rulefile import load_rules
from gpudiag.session import LiveNode

from conftest import REPO


def _assert_indexed_as_built(snapshot: Snapshot) -> Snapshot:
    derived, _ = with_derived(snapshot)
    built = Snapshot(
        derived.host, derived.created, derived.gpudiag_version, probes=derived.probes
    )
    assert list(derived.readings_by_key.items()) == list(built.readings_by_key.items())
    assert derived == replace(snapshot, probes=derived.probes)
    return derived


def test_the_index_is_the_one_the_results_give() -> None:
    from gpudiag import capture
    from gpudiag.probes import default_probes

    host, nvml, _ = capture.load(REPO / "snapshots" / "demo-hgx-h100-faulty.capture.json")
    snapshot = LiveNode(host, nvml, default_probes(), load_rules()).snapshot()
    assert any(p.name == DERIVED for p in snapshot.probes)  # a judged file: a stale one
    again = _assert_indexed_as_built(snapshot)
    fresh = replace(snapshot, probes=tuple(p for p in snapshot.probes if p.name != DERIVED))
    _assert_indexed_as_built(fresh)  # no derived result held
    # a derived key that a probe also wrote: its place is the probe's, its value derived
    shadow = next(r for r in again.probes if r.name == DERIVED).readings[0]
    probe = ProbeResult("x", ProbeStatus.OK, 0.0, (Reading(shadow.key, "probe's"),))
    _assert_indexed_as_built(replace(fresh, probes=(probe, *fresh.probes)))


def test_nothing_derived_keeps_the_results_and_their_index() -> None:
    probe = ProbeResult("host", ProbeStatus.OK, 0.0, (Reading("host.name", "n1"),))
    old = ProbeResult(DERIVED, ProbeStatus.OK, 0.0, (Reading("host.name", "stale"),))
    snapshot = Snapshot("n1", "2026-01-01T00:00:00Z", "t", probes=(probe, old))
    derived = _assert_indexed_as_built(snapshot)
    assert derived.probes == (probe,)
    assert derived.readings_by_key["host.name"].value == "n1"
