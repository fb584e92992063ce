"""`gpudiag --rules DIR fleet`: every node judged again with the shipped rules and the
site's (a baseline written by `gpudiag baseline`, say), as `gpudiag check --rules DIR`
judges one snapshot, so that a baseline is applied across a fleet in one command.

A node's latest snapshot is read again in full (the loaded fleet keeps only its numbers
and configuration) and its findings replace the ones it was saved with. A node read from
a Parquet fleet holds no readings to judge: it keeps its stored findings, and the caller
is told which."""

from __future__ import annotations

from collections.abc import Sequence

from gpudiag.fleet.records import LoadedFleet, NodeRun
from gpudiag.rulefile import Rule


def latest_runs(loaded: LoadedFleet) -> list[NodeRun]:
    """Each node's latest run (by time taken, then path), as the analysis picks it."""
    latest: dict[str, NodeRun] = {}
    for run in loaded.runs:
        known = latest.get(run.host)
        if known is None or (run.created, run.path) > (known.created, known.path):
            latest[run.host] = run
    return list(latest.values())


def judge_again(loaded: LoadedFleet, rules: Sequence[Rule]) -> list[str]:
    """Every node's latest snapshot judged with `rules`, its findings replaced; the
    paths that could not be judged again (Parquet runs; a file changed since and no
    longer readable is added to loaded.bad)."""
    from gpudiag.session import with_findings
    from gpudiag.snapshot import SnapshotError, load

    kept = []
    for run in latest_runs(loaded):
        if run.path.endswith(".parquet"):
            kept.append(run.path)
            continue
        try:
            snapshot = with_findings(load(run.path), list(rules))
        except (OSError, SnapshotError) as exc:
            loaded.bad.append(f"{run.path}: cannot read it again to judge it: {exc}")
            continue
        run.findings = tuple((f.rule_id, f.severity.value, f.subject) for f in snapshot.findings)
    return kept
