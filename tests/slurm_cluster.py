"""A real single-node Slurm cluster for tests: munged, slurmctld and slurmd from Debian's
`munge` and `slurm-wlm` packages, started as this user (root) with every file in one
folder, no systemd. Facts behind it: ../shared/notes/local-slurm.md."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from conftest import machine_lock

DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd", "scontrol", "srun", "sbatch", "sinfo")
SBIN = ("/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin")
# How long the daemons may take to bring the node up, failing early if one exits: within
# the per-test limit of the tests that start a cluster in their body (120 s).
STARTUP_LIMIT_S = 90.0


def find(program: str) -> str | None:
    """The program's path in the usual system folders or on PATH."""
    for folder in SBIN:
        if os.access(f"{folder}/{program}", os.X_OK):
            return f"{folder}/{program}"
    return shutil.which(program)


def missing() -> str | None:
    """Why a cluster cannot be started here, or None."""
    absent = [p for p in DAEMONS if find(p) is None]
    if absent:
        return f"{', '.join(absent)} not installed (apt-get install slurm-wlm munge; .ci/run does)"
    if os.geteuid() != 0:
        return "slurmd runs jobs and health checks as root: the Slurm tests need root"
    return None


@dataclass
class Cluster:
    """A running cluster: its folder, node name and the environment its clients need."""

    folder: Path
    node: str
    conf: Path
    env: dict[str, str]

    def run(
        self, *args: str, timeout: float = 30, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client (scontrol, srun, sinfo, ...) against this cluster."""
        command = [find(args[0]) or args[0], *args[1:]]
        return subprocess.run(
            command,
            capture_output=True,
            text=True,
            env={**self.env, **(env or {})},
            timeout=timeout,
            check=False,
        )

    def state(self) -> tuple[str, str]:
        """The node's state as sinfo words it (idle, drained, ...) and its reason."""
        result = self.run("sinfo", "-h", "-N", "-n", self.node, "-o", "%T|%E")
        state, _, reason = result.stdout.strip().partition("|")
        return state, reason

    def wait_state(
        self,
        wanted: str,
        timeout: float = 30,
        daemons: Sequence[subprocess.Popen[bytes]] = (),
    ) -> tuple[str, str]:
        """Poll until the node's state is exactly `wanted`; the last state seen. With
        DAEMONS (the cluster starting), fail as soon as one of them has exited."""
        deadline = time.monotonic() + timeout
        seen = ("", "")
        while time.monotonic() < deadline:
            seen = self.state()
            if seen[0] == wanted:
                return seen
            if ended := [d for d in daemons if d.poll() is not None]:
                raise AssertionError(f"{ended[0].args[0]} exited ({ended[0].returncode})")
            time.sleep(0.2)
        raise AssertionError(f"node {self.node} never became {wanted}: last {seen}")


CONF = """\
ClusterName=gpudiagtest
SlurmctldHost={node}
AuthType=auth/munge
AuthInfo=socket={folder}/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd.pid
SlurmctldLogFile={folder}/slurmctld.log
SlurmdLogFile={folder}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MailProg=/bin/true
ReturnToService=2
SlurmdTimeout=30
{health}
{gres_types}
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=1000{gres}
PartitionName=debug Nodes={node} Default=YES MaxTime=10 State=UP
"""


@contextlib.contextmanager
def cluster(
    folder: Path, health_check: str | None = None, interval: int = 2, gpus: int = 0
) -> Iterator[Cluster]:
    """Start munged, slurmctld and slurmd in `folder`, which every folder above must let
    others through (munged refuses a socket below a private folder: not pytest's
    tmp_path); stop them, by process id, on exit. `gpus`: the node is configured with
    that many GPUs (Gres=gpu:N), which this machine does not have: slurmd is given them
    as /dev/null in gres.conf, so slurmctld accepts the node (checked with N = 1)."""
    # the ports are fixed: one cluster at a time on this machine, whatever runs the tests
    with machine_lock("slurm-cluster"):
        yield from _cluster(folder, health_check, interval, gpus)


def _cluster(folder: Path, health_check: str | None, interval: int, gpus: int) -> Iterator[Cluster]:
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o755)
    (folder / "state").mkdir(exist_ok=True)
    (folder / "spool").mkdir(exist_ok=True)
    node = socket.gethostname().split(".")[0]
    health = ""
    if health_check:
        health = (
            f"HealthCheckProgram={health_check}\nHealthCheckInterval={interval}\n"
            "HealthCheckNodeState=ANY"
        )
    gres_types, gres = "", ""
    if gpus:
        gres_types, gres = "GresTypes=gpu", f" Gres=gpu:{gpus}"
        files = ",".join(["/dev/null"] * gpus)
        (folder / "gres.conf").write_text(f"NodeName={node} Name=gpu File={files}\n")
    conf = folder / "slurm.conf"
    text = CONF.format(
        node=node, folder=folder, cpus=os.cpu_count() or 1, health=health,
        gres_types=gres_types, gres=gres,
    )  # fmt: skip
    conf.write_text(text)
    env = {**os.environ, "SLURM_CONF": str(conf)}
    key = folder / "munge.key"
    subprocess.run([find("mungekey"), "--create", f"--keyfile={key}"], check=True)
    subprocess.run(
        [
            find("munged"),
            f"--socket={folder}/munge.socket",
            f"--key-file={key}",
            f"--pid-file={folder}/munged.pid",
            f"--log-file={folder}/munged.log",
            f"--seed-file={folder}/munged.seed",
        ],
        check=True,
    )
    daemons: list[subprocess.Popen[bytes]] = []
    try:
        for daemon in ("slurmctld", "slurmd"):
            log = (folder / f"{daemon}.out").open("wb")
            daemons.append(
                subprocess.Popen(
                    [find(daemon), "-D", "-f", str(conf)],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                )
            )
        running = Cluster(folder, node, conf, env)
        # while both daemons run, as long as their start takes: 30 s was not enough with
        # the suite under two busy loops ('' from sinfo: slurmctld not answering yet)
        running.wait_state("idle", STARTUP_LIMIT_S, daemons)
        yield running
    finally:
        for process in reversed(daemons):
            process.send_signal(signal.SIGTERM)
        for process in reversed(daemons):
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        pid_file = folder / "munged.pid"
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                pid = int(pid_file.read_text().strip())
                os.kill(pid, signal.SIGTERM)
                deadline = time.monotonic() + 5
                while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
                    time.sleep(0.05)  # munged writes its seed file as it exits
