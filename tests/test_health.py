"""`gpudiag health` in each convention: exit codes and output shape, end to end."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpudiag.health import (
    NPD_LINE_MAX,
    REASON_MAX,
    Slurm,
    Verdict,
    check_node,
    config_arguments,
    nagios,
    npd,
    slurm,
)
from gpudiag.model import Action, Finding, Severity
from gpudiag.output import applicable
from gpudiag.session import rule_tally

from conftest import NO_BUS_RULES, REPO, run_cli

TREE = str(REPO / "tests" / "fixtures" / "host-basic")
FAULTY = str(REPO / "snapshots" / "demo-hgx-h100-faulty.toml")
HEALTHY = str(REPO / "snapshots" / "demo-hgx-h100-healthy.toml")
EXAMPLES = REPO / "examples"
NAGIOS_FIRST = re.compile(
    r"^(OK|WARNING|CRITICAL|UNKNOWN) - [^|\n]+ \| critical=\d+;;;0 warning=\d+;;;0 "
    r"unknown=\d+;;;0 info=\d+;;;0$"
)


def site_rules(tmp_path: Path) -> str:
    """The fixture tree has no PCIe devices: NVML's 8 GPUs would be 8 too many (GPU031)."""
    folder = tmp_path / "rules"
    folder.mkdir(exist_ok=True)
    (folder / "site.toml").write_text(NO_BUS_RULES)
    return str(folder)


def health(replay: str, *args: str, rules: str | None = None) -> subprocess.CompletedProcess:
    options = ["--root", TREE, "--nvml-replay", replay]
    if rules:
        options += ["--rules", rules]
    return run_cli(*options, "health", *args)


def finding(rule: str, severity: Severity, action: Action) -> Finding:
    return Finding(rule, severity, "GPU 0", f"{rule} title", f"{rule} message", action=action)


def test_nagios_on_the_faulty_node() -> None:
    result = health(FAULTY)
    assert result.returncode == 2, result.stderr
    first, *details = result.stdout.splitlines()
    assert NAGIOS_FIRST.match(first), first
    # NVML seeing more GPUs than this tree's bus is GPU031, a warning (GPU002 is the other
    # way); GPU 4's NVLink 3 at half speed is NVL007, another. The tree's bus lists no
    # device, so no InfiniBand: GPUDirect RDMA is not needed (OS002 quiet); an NVML replay
    # records no nvidia-ml-py, so OS008 does not apply. Every info
    # finding is an info rule that cannot check on this small tree: the rules that could
    # not check (those 11 and the 16 unknown findings' rules) counted once, as check does.
    # The replay's driver gives the slowdown threshold only relative to T.Limit: GPU018
    # does not apply, GPU032 judges the margin to slowdown instead
    assert first.startswith(
        "CRITICAL - 2 critical, 8 warning, 16 unknown, 11 info; "
        "rules: 53 checked, 61 did not apply, 27 could not check;"
    )
    assert "action service: GPU001 GPU 7: GPU lost |" in first
    assert "critical=2;;;0 warning=8;;;0 unknown=16;;;0 info=11;;;0" in first
    assert details[0].startswith("CRITICAL GPU001   GPU 7: does not answer NVML")
    assert details[0].endswith("[action: service]")
    assert len(details) == 2 + 8 + 16 + 11


@pytest.mark.parametrize(
    ("findings", "code", "word"),
    [
        ((), 0, "OK"),
        ((finding("X001", Severity.INFO, Action.NONE),), 0, "OK"),
        ((finding("X001", Severity.WARNING, Action.MONITOR),), 1, "WARNING"),
        ((finding("X001", Severity.UNKNOWN, Action.NONE),), 3, "UNKNOWN"),
        ((finding("X001", Severity.CRITICAL, Action.RESET),), 2, "CRITICAL"),
    ],
)
def test_nagios_exit_codes(findings: tuple[Finding, ...], code: int, word: str) -> None:
    text, exit_code = nagios(Verdict("n1", findings, seconds=0.5))
    assert exit_code == code
    assert NAGIOS_FIRST.match(text.splitlines()[0])
    assert text.startswith(f"{word} - ")


def test_npd_one_short_line_and_its_exit_codes(tmp_path: Path) -> None:
    faulty = health(FAULTY, "--for", "npd")
    assert faulty.returncode == 1
    assert faulty.stdout == "GPU001 GPU 7: GPU lost (service); +1 more\n"
    # the healthy replay: nothing to act on, but checks that could not run on this tree
    healthy = health(HEALTHY, "--for", "npd", rules=site_rules(tmp_path))
    assert healthy.returncode == 2, healthy.stdout
    assert healthy.stdout.startswith("gpudiag: 16 checks could not run, e.g. CPU001")
    for result in (faulty, healthy):
        assert result.stdout.count("\n") == 1 and len(result.stdout) - 1 <= NPD_LINE_MAX
    warning = finding("X001", Severity.WARNING, Action.MONITOR)
    assert npd(Verdict("n1", (warning,))) == ("gpudiag: no GPU node problem (1 warnings)\n", 0)
    # a warning that recommends a reset is a problem; a not-applicable finding never is
    reset = finding("GPU006", Severity.WARNING, Action.RESET)
    assert npd(Verdict("n1", (reset,)))[1] == 1
    long = finding("X002" + "x" * 100, Severity.CRITICAL, Action.DRAIN)
    line, code = npd(Verdict("n1", (long,)))
    assert code == 1 and len(line) == NPD_LINE_MAX + 1 and line.endswith("...\n")


def test_an_info_rule_that_cannot_check_is_counted_apart_and_never_sets_the_code() -> None:
    """The decision in the issue about what users install (point 10): a warning or
    critical rule that cannot check is UNKNOWN; an info rule stays INFO, never sets the
    exit code, and the summaries say how many of the info notes could not check."""
    note = Finding("MEM003", Severity.INFO, "node", "t", "cannot check: mem.dimm.empty is missing")
    fine = finding("PCIE003", Severity.INFO, Action.NONE)
    text, code = nagios(Verdict("n1", (note, fine)))
    assert code == 0
    assert text.startswith("OK - 0 critical, 0 warning, 0 unknown, 2 info |")
    tally = rule_tally((note, fine, finding("CPU001", Severity.UNKNOWN, Action.NONE)))
    assert (tally.unknown, tally.info_unchecked) == (1, 1)
    assert tally.text() == "rules: 0 did not apply, 2 could not check"


def test_not_applicable_findings_never_count() -> None:
    na = Finding("NVL008", Severity.NOT_APPLICABLE, "GPU 0", "t", "m", action=Action.DRAIN)
    verdict = Verdict("n1", tuple(applicable([na])), rule_tally([na]))
    assert nagios(verdict)[1] == 0 and npd(verdict)[1] == 0
    assert "; rules: 1 did not apply, 0 could not check |" in nagios(verdict)[0]


def test_json_verdict() -> None:
    result = health(FAULTY, "--for", "json")
    assert result.returncode == 2
    data = json.loads(result.stdout)
    assert data["status"] == "CRITICAL" and data["exit_code"] == 2
    assert data["action"] == "service"
    assert data["counts"] == {"critical": 2, "warning": 8, "unknown": 16, "info": 11}
    # the rules' counts in the words (and numbers) of the Nagios line above and of check
    assert data["rules"] == {"checked": 53, "did_not_apply": 61, "could_not_check": 27}
    # a finding that could not check says so in its title, which alone is shown in places
    # (the TUI's "Fix first", the Nagios and NPD headlines): never the rule's bare claim
    titles = {f["title"] for f in data["findings"] if f["message"].startswith("cannot check:")}
    assert "could not check: nouveau module loaded" in titles
    assert len(titles) > 10 and all(t.startswith("could not check: ") for t in titles)
    assert data["findings"][0]["action"] == "service"
    by_rule = {(f["rule_id"], f["subject"]): f["action"] for f in data["findings"]}
    assert by_rule[("GPU011", "GPU 1")] == "reset"
    assert by_rule[("GPU004", "GPU 5")] == "none"


def test_a_check_that_runs_out_of_time_is_unknown() -> None:
    result = health(FAULTY, "--timeout", "0.000001")
    assert result.returncode == 3
    assert result.stdout.startswith("UNKNOWN - ")
    assert "check did not finish within 1e-06 s" in result.stdout
    npd_result = health(FAULTY, "--for", "npd", "--timeout", "0.000001")
    assert npd_result.returncode == 2


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--timeout", "0"], "--timeout: must be a finite number above 0"),
        (["--drain-on", "monitor"], "--drain-on monitor: each action is one of"),
        (["--kernels", "quick"], "--kernels measures this machine: not with --root"),
        (["--for", "pagerduty"], "invalid choice: 'pagerduty'"),
    ],
)
def test_bad_health_arguments_give_one_line_and_exit_3(args: list[str], expected: str) -> None:
    result = health(FAULTY, *args)
    assert result.returncode == 3
    assert result.stderr.count("\n") == 1 and expected in result.stderr, result.stderr
    assert result.stdout == ""


def test_slurm_healthcheck_settings_file(tmp_path: Path) -> None:
    settings = tmp_path / "slurm-healthcheck.toml"
    settings.write_text(
        'options = ["--rules", "/etc/gpudiag/site"]\ntimeout = 30\ndrain_on = ["service"]\n'
        'slurm_conf = "/etc/slurm/slurm.conf"\n'
    )
    assert config_arguments(settings) == [
        "--rules", "/etc/gpudiag/site", "health", "--for", "slurm", "--timeout", "30",
        "--drain-on", "service", "--slurm-conf", "/etc/slurm/slurm.conf",
    ]  # fmt: skip
    assert config_arguments(None)[-4:] == ["--timeout", "45.0", "--drain-on", "drain,service"]
    script = Path(sys.executable).parent / "gpudiag-slurm-healthcheck"
    settings.write_text('timeout = 30\nnodes = "all"\n')
    bad = subprocess.run(
        [str(script), "--config", str(settings)], capture_output=True, text=True, env={}
    )  # slurmd's environment: next to nothing
    assert bad.returncode == 3
    assert bad.stderr == f"gpudiag: {settings}: unknown key(s) nodes\n"
    usage = subprocess.run([str(script), "extra"], capture_output=True, text=True, env={})
    assert usage.returncode == 3 and usage.stderr.startswith("usage: gpudiag-slurm-healthcheck")


def test_shipped_examples_match_the_conventions() -> None:
    plugin = json.loads((EXAMPLES / "kubernetes" / "gpudiag-plugin-monitor.json").read_text())
    assert plugin["pluginConfig"]["max_output_length"] == NPD_LINE_MAX
    (rule,) = plugin["rules"]
    args = rule["args"]
    assert args[args.index("health") :][:3] == ["health", "--for", "npd"]
    gpudiag_timeout = float(args[args.index("--timeout") + 1])
    assert gpudiag_timeout < float(rule["timeout"].removesuffix("s"))  # answers before NPD kills
    arguments = config_arguments(EXAMPLES / "slurm" / "slurm-healthcheck.toml")
    assert arguments[arguments.index("health") :][:5] == [
        "health", "--for", "slurm", "--timeout", "45",
    ]  # fmt: skip
    for script in ("slurm/gpudiag-fleet.sbatch", "clustershell/fleet-health.sh"):
        syntax = subprocess.run(["bash", "-n", str(EXAMPLES / script)], capture_output=True)
        assert syntax.returncode == 0, syntax.stderr


def test_health_runs_the_quick_kernels_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpudiag.hostfs import HostFS
    from gpudiag.kernels import plans
    from gpudiag.nvml import open_nvml
    from gpudiag.probes import default_probes
    from gpudiag.rulefile import load_rules
    from gpudiag.session import LiveNode

    # the quick plan takes about a minute on a 2-core CPU: a tiny GEMM stands in for it
    tiny = plans.KernelPlan(("gemm",), "cpu", 2**16, trials=2, gemm_n=64)
    monkeypatch.setitem(plans.PLANS, "quick", tiny)
    node = LiveNode(HostFS(Path(TREE)), open_nvml(HEALTHY), default_probes(), load_rules())
    try:
        verdict = check_node(node, timeout=60, kernels="quick")
    finally:
        node.nvml.close()
    assert not verdict.error
    assert verdict.snapshot is not None
    gemm = [k for k in verdict.snapshot.kernels if k.kernel == "gemm"]
    assert gemm and all(k.device == "cpu" for k in gemm)
    assert any(k.stats is not None and k.stats.median > 0 for k in gemm)


class RecordingSlurm(Slurm):
    """The node's state held here; the real scontrol path runs in tests/test_slurm.py."""

    def __init__(self, state: str, reason: str = "") -> None:
        super().__init__("n1", "/nonexistent/scontrol", {})
        object.__setattr__(self, "now", (state, reason))
        object.__setattr__(self, "updates", [])

    def state(self) -> tuple[str, str]:
        return self.now

    def update(self, *fields: str) -> None:
        self.updates.append(fields)


DRAIN_ON = (Action.DRAIN, Action.SERVICE)


def test_slurm_decisions() -> None:
    lost = finding("GPU001", Severity.CRITICAL, Action.SERVICE)
    remap = finding("GPU011", Severity.CRITICAL, Action.RESET)
    idle = RecordingSlurm("IDLE")
    text, code = slurm(Verdict("n1", (remap, lost)), idle, DRAIN_ON)
    assert idle.updates == [("State=DRAIN", "Reason=gpudiag: GPU001 GPU 0: GPU001 title (service)")]
    assert code == 2 and text.startswith("gpudiag: n1: drained: gpudiag: GPU001")
    # a reset alone drains only when asked to
    idle = RecordingSlurm("IDLE")
    text, _ = slurm(Verdict("n1", (remap,)), idle, DRAIN_ON)
    assert idle.updates == [] and text == "gpudiag: n1: nothing to drain for (IDLE)\n"
    slurm(Verdict("n1", (remap,)), idle, (Action.RESET,))
    assert idle.updates[0][0] == "State=DRAIN"
    # a warning never drains, whatever it recommends
    warning = finding("NVL001", Severity.WARNING, Action.SERVICE)
    slurm(Verdict("n1", (warning,)), idle := RecordingSlurm("IDLE"), DRAIN_ON)
    assert idle.updates == []
    ours = "gpudiag: GPU001 GPU 0: GPU001 title (service)"
    # resumed once healthy, unless the check that drained it cannot be read now
    unread = finding("GPU001", Severity.UNKNOWN, Action.NONE)
    slurm(Verdict("n1", (unread,)), drained := RecordingSlurm("IDLE+DRAIN", ours), DRAIN_ON)
    assert drained.updates == []
    slurm(Verdict("n1", (warning,)), drained, DRAIN_ON)
    assert drained.updates == [("State=RESUME",)]
    # no verdict: nothing changes; someone else's drain: left alone
    slurm(Verdict("n1", error="check did not finish within 45 s"), drained, DRAIN_ON)
    other = RecordingSlurm("MIXED+DRAIN", "bad fan")
    text, _ = slurm(Verdict("n1", (lost,)), other, DRAIN_ON)
    note = (f"Comment={ours}",)  # the finding, visible in Slurm; their reason kept
    assert other.updates == [note] and "drained by someone else (bad fan); left alone" in text
    slurm(Verdict("n1", ()), other, DRAIN_ON)
    assert other.updates == [note] and drained.updates == [("State=RESUME",)]
    # a node someone set DOWN is theirs too: not drained over their reason, not resumed
    down = RecordingSlurm("DOWN", "PSU swap")
    text, _ = slurm(Verdict("n1", (lost,)), down, DRAIN_ON)
    assert down.updates == [(f"Comment={ours}",)]
    left = "gpudiag: n1: DOWN by someone else (PSU swap); left alone"
    assert text == f"{left}; noted in its Comment: {ours}\n"
    slurm(Verdict("n1", (warning,)), down, DRAIN_ON)
    assert down.updates == [(f"Comment={ours}",)]
    # Slurm adds flags after DRAIN (a maintenance reservation): still drained
    maintenance = RecordingSlurm("IDLE+DRAIN+MAINTENANCE", ours)
    slurm(Verdict("n1", (warning,)), maintenance, DRAIN_ON)
    assert maintenance.updates == [("State=RESUME",)]
    reserved = RecordingSlurm("MIXED+DRAIN+RESERVED", "bad fan")
    text, _ = slurm(Verdict("n1", (lost,)), reserved, DRAIN_ON)
    assert (
        reserved.updates == [(f"Comment={ours}",)] and "drained by someone else (bad fan)" in text
    )
    # one gpudiag drained that went down since: still gpudiag's to resume
    ours_down = RecordingSlurm("DOWN+DRAIN", ours)
    slurm(Verdict("n1", (warning,)), ours_down, DRAIN_ON)
    assert ours_down.updates == [("State=RESUME",)]


def test_nagios_text_never_holds_a_pipe_or_a_newline() -> None:
    """A `|` starts a plugin's performance data, in the first line and in the long
    output after it: the summary and every finding line hold none."""
    odd = Finding(
        "X001", Severity.CRITICAL, "GPU |0", 'title "a|b"', "lost |\nbus 1|2", action=Action.SERVICE
    )
    text, code = nagios(Verdict("n1", (odd,)))
    first, *details = text.splitlines()
    assert code == 2 and len(details) == 1
    assert first.count("|") == 1 and NAGIOS_FIRST.match(first), first
    assert 'action service: X001 GPU /0: title "a/b" |' in first
    assert "|" not in details[0]
    assert details[0] == "CRITICAL X001     GPU /0: lost / bus 1/2 [action: service]"


def test_slurm_drain_reason_is_one_line_without_double_quotes() -> None:
    odd = Finding(
        "X001", Severity.CRITICAL, "GPU 0", 'said "lost"\nagain', "m", action=Action.SERVICE
    )
    idle = RecordingSlurm("IDLE")
    slurm(Verdict("n1", (odd, finding("GPU001", Severity.CRITICAL, Action.DRAIN))), idle, DRAIN_ON)
    assert idle.updates == [
        ("State=DRAIN", "Reason=gpudiag: X001 GPU 0: said 'lost' again (service) +1 more")
    ]
    long = Finding("X001", Severity.CRITICAL, "GPU 0", "t" * 300, "m", action=Action.SERVICE)
    slurm(Verdict("n1", (long,)), idle := RecordingSlurm("IDLE"), DRAIN_ON)
    ((_, reason),) = idle.updates
    assert len(reason.removeprefix("Reason=")) == REASON_MAX and reason.endswith("t...")


def test_a_message_does_not_repeat_its_subject() -> None:
    """Where a finding's message follows its subject (check, export, Nagios), the subject
    is said once: 'PCIe 0000:5d:00.0: 0000:5d:00.0 link x8 of x16' before."""
    from gpudiag.session import format_finding

    nic = Finding(
        "PCIE004", Severity.WARNING, "PCIe 0000:5d:00.0", "t", "0000:5d:00.0 link x8 of x16"
    )
    assert format_finding(nic).endswith("PCIe 0000:5d:00.0: link x8 of x16")
    gpu = Finding(
        "GPU013", Severity.WARNING, "GPU 1", "t", "GPU 1: 1 row remapped", action=Action.MONITOR
    )
    text, _ = nagios(Verdict("n1", (gpu,)))
    assert "GPU013   GPU 1: 1 row remapped [action: monitor]" in text
    assert nic.message == "0000:5d:00.0 link x8 of x16"  # the JSON's message stays whole
