"""gpudiag on a real single-node Slurm (slurmctld, slurmd and munged started here):
srun and sbatch run it, and HealthCheckProgram = gpudiag-slurm-healthcheck drains the
node on a faulty replay with gpudiag's reason, resumes it once the fault is gone, and
leaves a node drained by someone else alone."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import slurm_cluster

from gpudiag.health import CONFIG_NAME, Slurm, Verdict, config_paths
from gpudiag.health import slurm as slurm_decision
from gpudiag.model import Action, Finding, Severity
from gpudiag.snapshot import load

from conftest import NO_BUS_RULES, REPO, run_cli

TREE = REPO / "tests" / "fixtures" / "host-basic"
FAULTY = REPO / "snapshots" / "demo-hgx-h100-faulty.toml"
HEALTHY = REPO / "snapshots" / "demo-hgx-h100-healthy.toml"
SCRIPT = Path(sys.executable).parent / "gpudiag-slurm-healthcheck"
GPUDIAG = Path(sys.executable).parent / "gpudiag"
INTERVAL = 1  # HealthCheckInterval, seconds
# How long a change the health check makes may take to show: a bound, not a measurement
# (one or two intervals on an idle machine; on a loaded one each check is a fresh
# interpreter that can take seconds to start, and it has 20 s: its settings' timeout).
SETTLE = 45

# one worker runs both files of real-cluster tests (tests/slurm_cluster.py: fixed ports)
pytestmark = [pytest.mark.timeout(300), pytest.mark.xdist_group("slurm")]


def _swap(target: Path, source: Path) -> None:
    """Replace the node's replay atomically: the health check never reads half a file."""
    temporary = target.with_suffix(".new")
    shutil.copyfile(source, temporary)
    os.replace(temporary, target)


@contextlib.contextmanager
def _settings(text: str) -> Iterator[Path]:
    """The health check's settings file where the console script looks first (its
    Python's prefix: slurmd passes it neither arguments nor environment)."""
    path = config_paths()[0]
    assert path.name == CONFIG_NAME
    if path.exists():
        pytest.fail(f"{path} exists already: not overwriting someone's settings")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    try:
        yield path
    finally:
        path.unlink()


@pytest.fixture(scope="module")
def slurm() -> Iterator[tuple[slurm_cluster.Cluster, Path]]:
    """A running cluster whose health check is gpudiag on a replay the test swaps."""
    if reason := slurm_cluster.missing():
        pytest.skip(reason)
    if not SCRIPT.exists():
        pytest.skip(f"{SCRIPT} not installed (pip install -e .)")
    folder = Path(tempfile.mkdtemp(prefix="gpudiag-slurm-", dir="/tmp"))
    replay = folder / "node-replay.toml"
    _swap(replay, HEALTHY)
    rules = folder / "rules"
    rules.mkdir()
    # the fixture tree has no PCIe devices, so NVML's 8 GPUs would be 8 too many
    (rules / "site.toml").write_text(NO_BUS_RULES)
    settings = (
        f'options = ["--root", "{TREE}", "--nvml-replay", "{replay}", "--rules", "{rules}",'
        f' "--prometheus", "{folder / "health.prom"}"]\n'
        f"timeout = 20\n"
        f'slurm_conf = "{folder / "slurm.conf"}"\n'
    )
    try:
        with _settings(settings), slurm_cluster.cluster(folder, str(SCRIPT), INTERVAL) as c:
            yield c, replay
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_srun_and_sbatch_collect_one_snapshot_per_node(slurm, tmp_path: Path) -> None:
    cluster, _ = slurm
    out = Path(tempfile.mkdtemp(prefix="gpudiag-srun-", dir="/tmp"))
    try:
        out.chmod(0o755)
        options = ["--root", str(TREE), "--nvml-replay", str(FAULTY)]
        step = cluster.run(
            "srun", "--nodes=1", "--ntasks-per-node=1", f"--output={out}/%N.json",
            f"--error={out}/%N.log", str(GPUDIAG), *options, "--export", "-", "--format", "json",
        )  # fmt: skip
        assert step.returncode == 2, step.stderr  # srun passes on gpudiag's verdict
        snapshot = load(out / f"{cluster.node}.json")
        assert {(f.rule_id, f.subject) for f in snapshot.findings} >= {("GPU001", "GPU 7")}
        assert "CRITICAL GPU001" in (out / f"{cluster.node}.log").read_text()
        check = run_cli("check", str(out / f"{cluster.node}.json"))
        assert check.returncode == 2
        batch = out / "batch"
        job = cluster.run(
            "sbatch", "--wait", "--nodes=1", f"--output={out}/job.log",
            str(REPO / "examples" / "slurm" / "gpudiag-fleet.sbatch"), str(batch), *options,
            timeout=60, env={"GPUDIAG": str(GPUDIAG)},
        )  # fmt: skip
        assert job.returncode == 0, job.stdout + job.stderr + (out / "job.log").read_text()
        assert load(batch / f"{cluster.node}.json").host == snapshot.host
        assert f"1 node snapshots in {batch}" in (out / "job.log").read_text()
    finally:
        shutil.rmtree(out, ignore_errors=True)


def test_health_for_slurm_run_by_hand(slurm) -> None:
    """What slurmd runs, run here: one line, the verdict's exit code, nothing changed
    on a healthy replay; an unknown node is a one-line error."""
    cluster, _ = slurm
    options = ["--root", str(TREE), "--nvml-replay", str(HEALTHY)]
    options += ["--rules", str(cluster.folder / "rules")]  # as the health check's settings
    args = ["health", "--for", "slurm", "--slurm-conf", str(cluster.conf)]
    result = run_cli(*options, *args, "--node", cluster.node)
    assert result.stdout == f"gpudiag: {cluster.node}: nothing to drain for (IDLE)\n"
    assert result.returncode == 3  # this fixture tree leaves 17 checks unknown
    missing = run_cli(*options, *args, "--node", "nosuchnode")
    assert missing.returncode == 3 and missing.stdout == ""
    assert missing.stderr.startswith("gpudiag: scontrol show node nosuchnode: ")
    assert missing.stderr.count("\n") == 1


def _hold(cluster: slurm_cluster.Cluster, state: str, reason: str) -> None:
    """Two more health checks run (each rewrites its --prometheus file, a new inode) and
    the node stays as it was."""
    metrics = cluster.folder / "health.prom"
    seen = {metrics.stat().st_ino} if metrics.exists() else set()
    deadline = time.monotonic() + SETTLE
    while len(seen) < 3:
        assert time.monotonic() < deadline, "the health check stopped running"
        assert cluster.state() == (state, reason)
        time.sleep(0.1)
        with contextlib.suppress(FileNotFoundError):
            seen.add(metrics.stat().st_ino)
    assert cluster.state() == (state, reason)


def test_health_check_drains_resumes_and_leaves_others_alone(slurm) -> None:
    cluster, replay = slurm
    node = cluster.node
    assert cluster.state() == ("idle", "none")  # healthy replay (warnings only): up
    _swap(replay, FAULTY)
    _, reason = cluster.wait_state("drained", timeout=SETTLE)
    assert reason == "gpudiag: GPU001 GPU 7: GPU lost (service)"  # GPU011's reset: no drain
    _swap(replay, HEALTHY)  # the fault is gone: gpudiag resumes the node it drained
    cluster.wait_state("idle", timeout=SETTLE)
    # someone else drains the node: gpudiag leaves it alone, healthy or faulty
    drain = cluster.run("scontrol", "update", f"NodeName={node}", "State=DRAIN",
                        "Reason=fan replaced, burn-in pending")  # fmt: skip
    assert drain.returncode == 0, drain.stderr
    cluster.wait_state("drained")
    _hold(cluster, "drained", "fan replaced, burn-in pending")
    _swap(replay, FAULTY)
    _hold(cluster, "drained", "fan replaced, burn-in pending")
    # the operator resumes it: the next check finds the fault and drains it, for gpudiag
    cluster.run("scontrol", "update", f"NodeName={node}", "State=RESUME")
    _, reason = cluster.wait_state("drained", timeout=SETTLE)
    assert reason.startswith("gpudiag: GPU001 GPU 7: GPU lost (service)")
    _swap(replay, HEALTHY)
    cluster.wait_state("idle", timeout=SETTLE)


LOST = Finding("GPU001", Severity.CRITICAL, "GPU 0", "GPU lost", "m", action=Action.SERVICE)
RESET = Finding("GPU011", Severity.CRITICAL, "GPU 0", "needs reset", "m", action=Action.RESET)
WARN = Finding("NVL001", Severity.WARNING, "GPU 0", "link slow", "m", action=Action.SERVICE)
UNREAD = Finding("GPU001", Severity.UNKNOWN, "GPU 0", "GPU lost", "m", action=Action.NONE)
OTHER_UNREAD = Finding("PCIE004", Severity.UNKNOWN, "node", "t", "m", action=Action.NONE)
NOW = {  # the node's health now, as a verdict
    "critical": Verdict("n", (LOST, WARN)),
    "critical, not a drain action": Verdict("n", (RESET,)),
    "healthy": Verdict("n", (WARN,)),
    "the draining check unreadable": Verdict("n", (UNREAD,)),
    "another check unreadable": Verdict("n", (OTHER_UNREAD, WARN)),
    "no verdict": Verdict("n", error="check did not finish within 45 s"),
}
OURS = "gpudiag: GPU001 GPU 0: GPU lost (service)"
BY = {  # who drained (or downed) the node: the scontrol fields that make it so
    "nobody": None,
    "gpudiag": ("State=DRAIN", f"Reason={OURS}"),
    "someone else": ("State=DRAIN", "Reason=fan replaced"),
    "someone else, down": ("State=DOWN", "Reason=PSU swap"),
}
# (by whom, health now) -> (state, reason) afterwards, as sinfo words them
LEFT = {by: ("idle", "none") for by in BY} | {
    "gpudiag": ("drained", OURS),
    "someone else": ("drained", "fan replaced"),
    "someone else, down": ("down", "PSU swap"),
}
DECISIONS = {
    **{(by, now): LEFT[by] for by in BY for now in NOW},
    ("nobody", "critical"): ("drained", OURS),  # drained, for gpudiag
    ("gpudiag", "critical, not a drain action"): ("idle", "none"),  # resumed
    ("gpudiag", "healthy"): ("idle", "none"),  # resumed
    ("gpudiag", "another check unreadable"): ("idle", "none"),  # resumed
}


def test_slurm_decision_table_on_a_real_slurmctld(slurm) -> None:
    """Every (drained by whom, health now) pair, decided by health.slurm against the
    running slurmctld through the real scontrol; the health check slurmd runs is kept
    out of the way meanwhile (its replay made unreadable, so it changes nothing). About
    15 s: 24 cases, each a few scontrol and sinfo round trips."""
    cluster, replay = slurm
    replay.write_text("not a replay [")
    _quiet(cluster)
    real = Slurm(cluster.node, str(slurm_cluster.find("scontrol")), cluster.env)
    wrong = []
    try:
        for (by, now), expected in DECISIONS.items():
            if cluster.state() != ("idle", "none"):
                cluster.run("scontrol", "update", f"NodeName={cluster.node}", "State=RESUME")
                cluster.wait_state("idle", timeout=SETTLE)
            if BY[by]:
                changed = cluster.run("scontrol", "update", f"NodeName={cluster.node}", *BY[by])
                assert changed.returncode == 0, changed.stderr
                cluster.wait_state(LEFT[by][0], timeout=SETTLE)
            text, code = slurm_decision(NOW[now], real, (Action.DRAIN, Action.SERVICE))
            assert code == NOW[now].code and text.count("\n") == 1, text
            if expected[0] == "idle":
                state = cluster.wait_state("idle", timeout=SETTLE)
            else:
                state = cluster.state()
            if state != expected:
                wrong.append(f"{by} / {now}: {state} expected {expected} ({text.strip()})")
    finally:
        _swap(replay, HEALTHY)
        cluster.run("scontrol", "update", f"NodeName={cluster.node}", "State=RESUME")
        cluster.wait_state("idle", timeout=SETTLE)
    assert not wrong, "\n".join(wrong)


def _quiet(cluster: slurm_cluster.Cluster) -> None:
    """Wait until the health check has stopped writing its metrics (it cannot read the
    replay): no check is running with the old one."""
    metrics = cluster.folder / "health.prom"
    last, still = None, time.monotonic()
    deadline = time.monotonic() + 30
    while time.monotonic() - still < 4 * INTERVAL + 2:
        assert time.monotonic() < deadline, "the health check kept writing its metrics"
        with contextlib.suppress(FileNotFoundError):
            seen = metrics.stat().st_ino, metrics.stat().st_mtime_ns
            if seen != last:
                last, still = seen, time.monotonic()
        time.sleep(0.2)
