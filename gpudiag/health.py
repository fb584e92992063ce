"""`gpudiag health`: the quick, safe check, spoken in the conventions of the engines
fleets already run (the command's arguments: gpudiag/commands/health.py). Probes and
rules only (the kernels only with `--kernels quick`), bounded by `--timeout` (45 s by
default: Slurm kills a health check at 60 s, and the drain must still happen).

    gpudiag [OPTIONS] health [--for nagios|npd|slurm|json] [--timeout S] [--kernels quick]
                             [--drain-on ACTIONS] [--node NAME] [--scontrol PATH]
                             [--slurm-conf FILE]

`gpudiag --prometheus FILE health ...` also writes the check's snapshot in node_exporter's
textfile format, so a periodic health check keeps the node's metrics fresh.

- nagios (default): `STATUS - summary | perfdata`, then one line per finding; exit 0 OK,
  1 WARNING, 2 CRITICAL, 3 UNKNOWN. A Nagios/Icinga plugin, and an NHC check.
- npd (Kubernetes Node Problem Detector's custom plugin protocol): one line of at most
  80 characters, the worst finding first; exit 0 OK, 1 a problem (a finding that
  recommends reset, reboot, drain or service), 2 unknown.
- slurm: for HealthCheckProgram. Drains the node (`scontrol update State=DRAIN
  Reason="gpudiag: ..."`) when a critical finding recommends one of `--drain-on`
  (drain, service); resumes a node only when gpudiag drained it (its reason starts with
  `gpudiag:`) and the check now finds nothing to drain for; a node drained by anyone
  else is left alone. The GPUs Slurm configures for the node (its GRES, `Gres=gpu:8`) are
  what it should have (node.expected_gpus): fewer on the PCI bus or in NVML is critical
  and drains (NODE001, NODE002). `gpudiag-slurm-healthcheck` runs this with no arguments.
- json: the verdict and the findings, for pipelines.

Not-applicable findings never count against a node, warnings never drain one, unknown
counts as unknown (no drain, no resume).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpudiag import inputs
from gpudiag.model import Action, Finding, ProbeResult, Severity, Snapshot
from gpudiag.output import applicable, strongest_action

# the command line loads this module for its parser (gpudiag/commands/health.py: the
# conventions, the defaults): gpudiag.session (the probes and the rules engine) and
# slurmgres are imported where they are used
if TYPE_CHECKING:
    import subprocess

    from gpudiag.session import LiveNode, RuleTally

CONVENTIONS = ("nagios", "npd", "slurm", "json")
STATUS_WORDS = ("OK", "WARNING", "CRITICAL", "UNKNOWN")
NPD_OK, NPD_PROBLEM, NPD_UNKNOWN = 0, 1, 2
NPD_LINE_MAX = 80
PROBLEM_ACTIONS = (Action.RESET, Action.REBOOT, Action.DRAIN, Action.SERVICE)
DEFAULT_DRAIN_ON = (Action.DRAIN, Action.SERVICE)
DEFAULT_TIMEOUT = 45.0
REASON_PREFIX = "gpudiag:"
REASON_MAX = 120
# slurmd runs the health check with no PATH: look where Slurm's clients are installed
SLURM_BIN_DIRS = ("/usr/bin", "/usr/local/bin", "/opt/slurm/bin", "/usr/sbin")
CONFIG_NAME = "slurm-healthcheck.toml"
CONFIG_KEYS = {"options", "timeout", "kernels", "drain_on", "slurm_conf", "scontrol"}
CONFIG_MAX_BYTES = 64 * 1024  # a settings file is a few lines
# slurmd kills a HealthCheckProgram at 60 s: the whole check, scontrol included, ends
# within SLURM_BUDGET_S; the probes get what is left but SCONTROL_RESERVE_S (at most
# --timeout), each scontrol call at most SCONTROL_CALL_S of what is left
SLURM_BUDGET_S = 50.0
SCONTROL_RESERVE_S = 5.0
SCONTROL_CALL_S = 10.0
# what is read of one scontrol answer: `show node NAME --oneliner` is one line of about
# 1 KB (some 40 fields; tests/test_contract.py's real one is 70 bytes of them), 64 times
# that is no answer Slurm gives; a 200 MB one took 72 s and 608 MB before it was bounded
SCONTROL_MAX_BYTES = 64 * 1024
# one Slurm node name (NodeName=n1,n[2-99] would name many): letters, digits, . _ -
NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
TIMEOUT_MAX = 3600.0


class HealthError(Exception):
    """Bad health-check input; str() is the one-line message (exit 3)."""


# ------------------------------------------------------------------ the check


@dataclass(frozen=True)
class Verdict:
    """The outcome of one check: the findings that count, worst first, or why none."""

    host: str
    findings: tuple[Finding, ...] = ()
    rules: RuleTally | None = None  # checked, did not apply, could not check
    seconds: float = 0.0
    error: str = ""
    snapshot: Snapshot | None = field(default=None, repr=False, compare=False)
    timed_out: bool = False

    @property
    def code(self) -> int:
        """The monitoring-plugin exit code: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN."""
        from gpudiag.session import EXIT_UNKNOWN, exit_code

        return EXIT_UNKNOWN if self.error else exit_code(self.findings)

    @property
    def action(self) -> Action:
        """The strongest action the findings recommend."""
        return strongest_action(self.findings)

    def ranked(self) -> list[Finding]:
        """Findings by strongest action, then worst severity."""
        return sorted(self.findings, key=lambda f: (-f.action.rank, -f.severity.rank))

    def problems(self) -> list[Finding]:
        """Findings that recommend doing something to the node or a GPU (NPD's problems)."""
        return [f for f in self.ranked() if f.action in PROBLEM_ACTIONS]


def check_node(node: LiveNode, timeout: float, kernels: str | None = None) -> Verdict:
    """Probe and judge the node in a worker thread; an UNKNOWN verdict saying so when it
    does not finish within `timeout` seconds (probes are then cancelled)."""
    import socket
    import threading

    started = time.monotonic()
    box: dict[str, Any] = {}

    def work() -> None:
        stage = "probing and judging the node"
        try:
            snapshot = node.snapshot()
            if kernels:
                from gpudiag.kernels.plans import PLANS
                from gpudiag.kernels.runner import PlanRun
                from gpudiag.session import run_kernels

                stage = f"running the {kernels} kernels"
                run = PlanRun(PLANS[kernels], node.host, cancel=node.cancel, nvml=node.nvml)
                snapshot = run_kernels(snapshot, run, node.rules, node.profile_name)
            box["snapshot"] = snapshot
        except Exception as exc:  # reported as an UNKNOWN verdict, never a traceback
            box["error"] = failure_text(stage, exc)
            if os.environ.get("GPUDIAG_DEBUG"):  # but where it is asked for
                import traceback

                traceback.print_exc()

    worker = threading.Thread(target=work, name="gpudiag-health", daemon=True)
    worker.start()
    worker.join(timeout)
    seconds = time.monotonic() - started
    host = inputs.host_name(os.environ.get("SLURMD_NODENAME") or socket.gethostname())
    host = host.split(".")[0]
    if worker.is_alive():
        node.cancel.set()
        error = f"check did not finish within {timeout:g} s"
        return Verdict(host, seconds=seconds, error=error, timed_out=True)
    if "error" in box:
        return Verdict(host, seconds=seconds, error=box["error"])
    from gpudiag.session import rule_tally

    snapshot = box["snapshot"]
    tally = rule_tally(snapshot.findings, node.rules, snapshot.readings_by_key)
    return Verdict(
        snapshot.host, tuple(applicable(snapshot.findings)), tally, seconds, snapshot=snapshot
    )


def failure_text(stage: str, exc: BaseException) -> str:
    """What an UNKNOWN verdict says of a check that failed: what could not be done
    (`stage`), and why in gpudiag's own words where the error is one of gpudiag's (a
    file or a recording it could not read names itself); never Python's text of an
    unexpected error (OverflowError: int too large to convert to float), only its kind."""
    if type(exc).__module__.partition(".")[0] == "gpudiag":  # one of gpudiag's errors
        why = _one_line(inputs.printable(str(exc)))[:200]
    else:
        why = f"an internal error ({type(exc).__name__}; GPUDIAG_DEBUG=1 shows where)"
    return f"could not finish {stage}: {why}"


# ------------------------------------------------------------------ conventions


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _plugin_text(text: str) -> str:
    """One line without '|', which starts a Nagios plugin's performance data."""
    return _one_line(text).replace("|", "/")


def _headline(finding: Finding) -> str:
    return f"{finding.rule_id} {finding.subject}: {finding.title}"


def no_nvidia_gpu(verdict: Verdict) -> bool:
    """Whether the check found a node without NVIDIA GPUs (none on its PCI bus, none in
    NVML): the GPU rules did not apply, which the summary says in words."""
    reading = verdict.snapshot.reading("node.nvidia_gpus") if verdict.snapshot else None
    return reading is not None and reading.ok and reading.value is False


def nagios(verdict: Verdict) -> tuple[str, int]:
    """`STATUS - summary | perfdata` on the first line, one finding per line after. No
    host name and no timing: Nagios knows the host, and `clubak -c` folds the identical
    outputs of a fleet's healthy nodes into one."""
    from gpudiag.session import severity_counts, severity_words

    code = verdict.code
    status = STATUS_WORDS[code]
    if verdict.error:
        summary = verdict.error
    else:
        summary = severity_words(verdict.findings)
        if verdict.rules is not None:
            summary += f"; {verdict.rules.text()}"
        if no_nvidia_gpu(verdict):
            summary += "; no NVIDIA GPU on this node"
        ranked = verdict.ranked()
        if ranked and ranked[0].action is not Action.NONE:
            summary += f"; action {ranked[0].action.value}: {_headline(ranked[0])}"
    perf = " ".join(f"{s.value}={n};;;0" for s, n in severity_counts(verdict.findings).items())
    first = f"{status} - {_plugin_text(summary)} | {perf}"
    details = [
        f"{f.severity.value.upper():<8} {f.rule_id:<8} {_plugin_text(f'{f.subject}: {f.said()}')}"
        f" [action: {f.action.value}]"
        for f in verdict.findings
    ]
    return "\n".join([first, *details]) + "\n", code


def npd(verdict: Verdict) -> tuple[str, int]:
    """Node Problem Detector: one line (at most 80 characters), worst first; 0/1/2."""
    problems = verdict.problems()
    if problems:
        line = f"{_headline(problems[0])} ({problems[0].action.value})"
        if len(problems) > 1:
            line += f"; +{len(problems) - 1} more"
        code = NPD_PROBLEM
    elif verdict.error:
        line, code = f"gpudiag: {verdict.error}", NPD_UNKNOWN
    elif unknown := [f for f in verdict.findings if f.severity is Severity.UNKNOWN]:
        line = f"gpudiag: {len(unknown)} checks could not run, e.g. {_headline(unknown[0])}"
        code = NPD_UNKNOWN
    else:
        warnings = sum(1 for f in verdict.findings if f.severity is Severity.WARNING)
        line, code = f"gpudiag: no GPU node problem ({warnings} warnings)", NPD_OK
    line = _one_line(line)
    if len(line) > NPD_LINE_MAX:
        line = line[: NPD_LINE_MAX - 3] + "..."
    return line + "\n", code


def as_json(verdict: Verdict) -> tuple[str, int]:
    """The verdict and the findings as one JSON object."""
    from gpudiag.session import severity_counts

    data = {
        "host": verdict.host,
        "status": STATUS_WORDS[verdict.code],
        "exit_code": verdict.code,
        "action": verdict.action.value,
        "seconds": round(verdict.seconds, 3),
        "error": verdict.error,
        "counts": {s.value: n for s, n in severity_counts(verdict.findings).items()},
        "rules": verdict.rules.as_dict() if verdict.rules is not None else {},
        "findings": [
            {
                "rule_id": f.rule_id,
                "severity": f.severity.value,
                "subject": f.subject,
                "title": f.title,
                "message": f.message,
                "action": f.action.value,
            }
            for f in verdict.findings
        ],
    }
    return json.dumps(data, indent=1) + "\n", verdict.code


# ------------------------------------------------------------------ Slurm


def _scontrol_text(data: bytes) -> str:
    """scontrol's output as printable text, whatever bytes it wrote."""
    return inputs.printable(data.decode("utf-8", errors="replace"))


class _TooLarge(Exception):
    """A command's output past its bound."""


def _read_bounded(
    process: subprocess.Popen[bytes], seconds: float, max_bytes: int
) -> tuple[bytes, bytes]:
    """A command's stdout and stderr, read together until both close and it ends, within
    `seconds` (subprocess.TimeoutExpired) and `max_bytes` in all (_TooLarge): what
    communicate() does, bounded in size as well as in time."""
    import selectors
    import subprocess

    deadline = time.monotonic() + seconds
    chunks: dict[int, list[bytes]] = {}
    size = 0
    with selectors.DefaultSelector() as selector:
        for stream in (process.stdout, process.stderr):
            assert stream is not None
            selector.register(stream, selectors.EVENT_READ)
            chunks[stream.fileno()] = []
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(process.args, seconds)
            for key, _ in selector.select(left):
                data = os.read(key.fd, 65536)
                if not data:
                    selector.unregister(key.fileobj)
                    continue
                chunks[key.fd].append(data)
                size += len(data)
                if size > max_bytes:
                    raise _TooLarge
    process.wait(max(0.0, deadline - time.monotonic()))
    assert process.stdout is not None and process.stderr is not None
    return (
        b"".join(chunks[process.stdout.fileno()]),
        b"".join(chunks[process.stderr.fileno()]),
    )


@dataclass(frozen=True)
class Slurm:
    """How to reach slurmctld for one node. Every scontrol call ends by `deadline`
    (time.monotonic()), at most SCONTROL_CALL_S each: a hung scontrol is killed with its
    process group, and the whole check stays within SLURM_BUDGET_S."""

    node: str
    scontrol: str
    env: dict[str, str]
    deadline: float = math.inf

    def _run(self, what: str, *args: str) -> subprocess.CompletedProcess[str]:
        """scontrol ARGS; HealthError in one line, starting `what`, when it cannot run,
        hangs or fails."""
        import signal
        import subprocess

        left = min(SCONTROL_CALL_S, self.deadline - time.monotonic())
        if left <= 0:
            raise HealthError(f"{what}: no time left within the {SLURM_BUDGET_S:g} s check")
        try:
            process = subprocess.Popen(
                [self.scontrol, *args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=self.env,
                start_new_session=True,  # a hung scontrol is killed with its children
            )
        except OSError as exc:
            raise HealthError(
                f"scontrol {self.scontrol}: cannot run: {exc.strerror or exc}"
            ) from None
        try:
            out, err = _read_bounded(process, left, SCONTROL_MAX_BYTES)
        except (subprocess.TimeoutExpired, _TooLarge) as exc:
            with contextlib.suppress(OSError):
                os.killpg(process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.communicate(timeout=2)
            if isinstance(exc, _TooLarge):
                size = inputs.size_text(SCONTROL_MAX_BYTES)
                raise HealthError(f"{what}: an answer larger than {size}; killed") from None
            raise HealthError(f"{what}: no answer within {left:.3g} s; killed") from None
        stdout, stderr = _scontrol_text(out), _scontrol_text(err)
        if process.returncode != 0:
            why = _one_line(stderr)[:200] or f"exit status {process.returncode}"
            raise HealthError(f"{what}: {why}")
        return subprocess.CompletedProcess(args, process.returncode, stdout, stderr)

    def show(self) -> str:
        """`scontrol show node <node> --oneliner`'s answer; HealthError without State=."""
        what = f"scontrol show node {self.node}"
        result = self._run(what, "show", "node", self.node, "--oneliner")
        if re.search(r"\bState=(\S+)", result.stdout) is None:
            answer = _one_line(result.stdout)[:80]
            raise HealthError(f"{what}: no State= in {answer!r}")
        return result.stdout

    def state(self) -> tuple[str, str]:
        """The node's state (IDLE+DRAIN, ...) and its reason, without the [user@time]."""
        answer = self.show()
        state = re.search(r"\bState=(\S+)", answer)
        assert state is not None  # show() checked it
        # one pass to the end (a 200 MB answer: issue 37); the Comment Slurm prints after
        # the reason (where note_finding wrote one) and the [user@time] it adds are not it
        reason = re.search(r"\bReason=(.*)", answer.strip())
        text = reason.group(1).split(" Comment=", 1)[0] if reason else ""
        text = re.sub(r" \[[^\[\]]*\]\s*$", "", text)
        return (inputs.one_line(state.group(1)), inputs.one_line(text))  # one-line fields

    def expected_gpus(self) -> ProbeResult | None:
        """The GPUs Slurm configures for the node (its GRES) as the `slurm` pseudo-probe's
        node.expected_gpus; None where scontrol shows no Gres= field."""
        from gpudiag import slurmgres

        try:
            return slurmgres.expected_gpus(self.show(), self.node)
        except ValueError as exc:  # GresError, or any other number it cannot read
            raise HealthError(f"scontrol show node {self.node}: {exc}") from None

    def update(self, *fields: str) -> None:
        """scontrol update NodeName=<node> FIELDS..."""
        self._run(f"scontrol update {self.node}", "update", f"NodeName={self.node}", *fields)


def find_scontrol(explicit: str | None) -> str:
    """scontrol's path: the one given, else Slurm's usual folders, else PATH."""
    if explicit:
        return explicit
    for folder in SLURM_BIN_DIRS:
        if os.access(f"{folder}/scontrol", os.X_OK):
            return f"{folder}/scontrol"
    import shutil

    found = shutil.which("scontrol")
    if found is None:
        raise HealthError(f"scontrol not found in {', '.join(SLURM_BIN_DIRS)} or PATH")
    return found


def drain_reason(problems: Sequence[Finding]) -> str:
    """`gpudiag: RULE SUBJECT: title (action)`, with a count of the others."""
    reason = f"{REASON_PREFIX} {_headline(problems[0])} ({problems[0].action.value})"
    if len(problems) > 1:
        reason += f" +{len(problems) - 1} more"
    reason = _one_line(reason).replace('"', "'")
    return reason if len(reason) <= REASON_MAX else reason[: REASON_MAX - 3] + "..."


def note_finding(cluster: Slurm, wanted: str) -> str:
    """A finding that would drain the node while someone else's drain (or DOWN) holds
    it: their State and Reason stay theirs, and the finding goes to the node's Comment
    (`scontrol update Comment=...`), which `scontrol show node` and `sinfo -O comment`
    show, so that whoever resumes the node sees it; the tail of the check's line."""
    try:
        cluster.update(f"Comment={wanted}")
    except HealthError as exc:
        return f"; the finding could not be noted in Slurm ({exc})"
    return f"; noted in its Comment: {wanted}"


def slurm(verdict: Verdict, cluster: Slurm, drain_on: Sequence[Action]) -> tuple[str, int]:
    """Drain, resume or leave the node; one line saying which."""
    state, reason = cluster.state()
    flags = state.split("+")
    drained = any(flag.startswith("DRAIN") for flag in flags)
    # a node someone set DOWN (or FAIL) is theirs as much as one they drained: draining
    # it would replace their reason with ours, and the next healthy check resume it
    down = any(flag.startswith(("DOWN", "FAIL")) for flag in flags)
    ours = reason.startswith(REASON_PREFIX)
    node = cluster.node
    problems = [
        f for f in verdict.ranked() if f.severity is Severity.CRITICAL and f.action in drain_on
    ]
    if verdict.error:
        return f"gpudiag: {node}: no verdict ({verdict.error}); left {state}\n", verdict.code
    if problems:
        wanted = drain_reason(problems)
        if drained and not ours:
            message = f"gpudiag: {node}: drained by someone else ({reason}); left alone"
            message += note_finding(cluster, wanted)
        elif down and not ours:
            message = f"gpudiag: {node}: {state} by someone else ({reason}); left alone"
            message += note_finding(cluster, wanted)
        elif drained:
            message = f"gpudiag: {node}: still drained: {reason}"
        else:
            cluster.update("State=DRAIN", f"Reason={wanted}")
            message = f"gpudiag: {node}: drained: {wanted}"
        return message + "\n", verdict.code
    if drained and ours:
        # resume only once the check that drained the node reads fine again
        unread = [
            f
            for f in verdict.findings
            if f.severity is Severity.UNKNOWN and f"{f.rule_id} {f.subject}:" in reason
        ]
        if unread:
            return (
                f"gpudiag: {node}: still drained: {_headline(unread[0])} cannot be checked\n",
                verdict.code,
            )
        cluster.update("State=RESUME")
        return f"gpudiag: {node}: healthy again; resumed (was: {reason})\n", verdict.code
    if drained:
        return f"gpudiag: {node}: healthy; drained by someone else, left alone\n", verdict.code
    return f"gpudiag: {node}: nothing to drain for ({state})\n", verdict.code


def parse_actions(text: str) -> tuple[Action, ...]:
    """`drain,service` -> the actions; HealthError for an unknown name."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    allowed = {a.value for a in PROBLEM_ACTIONS}
    for name in names:
        if name not in allowed:
            raise HealthError(f"--drain-on {text}: each action is one of {', '.join(allowed)}")
    if not names:
        raise HealthError("--drain-on needs at least one action (drain,service)")
    return tuple(Action(name) for name in names)


# ------------------------------------------------------------------ the settings file


def config_paths() -> list[Path]:
    """Where `gpudiag-slurm-healthcheck` looks for its settings, first found wins."""
    return [Path(sys.prefix) / "etc" / "gpudiag" / CONFIG_NAME, Path("/etc/gpudiag") / CONFIG_NAME]


def config_arguments(path: Path | None) -> list[str]:
    """The gpudiag command line a health-check settings file stands for.

    options = ["--rules", "/etc/gpudiag/site"]   # gpudiag options before `health`
    timeout = 45                                 # seconds
    kernels = "quick"                            # also run the quick kernels
    drain_on = ["drain", "service"]
    slurm_conf = "/etc/slurm/slurm.conf"         # SLURM_CONF for scontrol
    scontrol = "/usr/bin/scontrol"
    """
    data: dict[str, Any] = {}
    if path is not None:
        # the one bounded reader: a regular file (a FIFO is refused, never waited on), at
        # most CONFIG_MAX_BYTES; deep nesting and oversized integers refused; printable
        try:
            text = inputs.read_text(path, "a settings file", max_bytes=CONFIG_MAX_BYTES)
            data = inputs.parse_data(text, str(path), as_json=False)
        except inputs.InputError as exc:
            raise HealthError(str(exc)) from None
    unknown = set(data) - CONFIG_KEYS
    if unknown:
        raise HealthError(f"{path}: unknown key(s) {', '.join(sorted(unknown))}")
    options = data.get("options", [])
    if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
        raise HealthError(f"{path}: options must be a list of strings")
    drain_on = data.get("drain_on", [a.value for a in DEFAULT_DRAIN_ON])
    if not isinstance(drain_on, list) or not all(isinstance(a, str) for a in drain_on):
        raise HealthError(f"{path}: drain_on must be a list of actions")
    timeout = data.get("timeout", DEFAULT_TIMEOUT)
    try:
        inputs.check_number(timeout, 0, TIMEOUT_MAX, above=True)  # as --timeout checks it
    except ValueError as exc:
        raise HealthError(f"{path}: timeout {exc} (seconds)") from None
    health = ["--for", "slurm", "--timeout", str(timeout), "--drain-on", ",".join(drain_on)]
    for key in ("kernels", "slurm_conf", "scontrol"):
        if key in data:
            if not isinstance(data[key], str):
                raise HealthError(f"{path}: {key} must be a string")
            health += [f"--{key.replace('_', '-')}", data[key]]
    return [*options, "health", *health]
