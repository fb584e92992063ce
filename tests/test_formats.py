"""--format json|prometheus|junit and --prometheus FILE, checked with the real tools:
Prometheus' promtool and a JUnit parser (junitparser)."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from junitparser import Error, Failure, JUnitXml, Skipped

from gpudiag.inputs import one_line
from gpudiag.model import Finding, KernelResult, ProbeStatus, Severity, Statistics
from gpudiag.output import is_not_applicable
from gpudiag.output.junit import junit
from gpudiag.output.prometheus import prometheus
from gpudiag.rulefile import load_rules
from gpudiag.snapshot import load, loads

from conftest import REPO, run_cli

TREE = str(REPO / "tests" / "fixtures" / "host-basic")
FAULTY = str(REPO / "snapshots" / "demo-hgx-h100-faulty.toml")
NODE = ("--root", TREE, "--nvml-replay", FAULTY)


def promtool() -> str:
    """The real promtool (Debian's prometheus package), or skip saying how to get it."""
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool not installed (apt-get install --no-install-recommends prometheus)")
    return path


def promtool_check(text: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )


@pytest.fixture(scope="module")
def faulty(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("faulty") / "node.toml"
    assert run_cli(*NODE, "--export", str(target)).returncode == 2
    return target


def test_export_json_to_stdout_for_srun(faulty: Path) -> None:
    result = run_cli(*NODE, "--export", "-", "--format", "json")
    assert result.returncode == 2
    assert result.stdout.startswith("{")
    snapshot = loads(result.stdout)
    assert json.loads(result.stdout)["findings"][0]["action"] == "service"
    assert [f.rule_id for f in snapshot.findings] == [f.rule_id for f in load(faulty).findings]
    assert "CRITICAL GPU001" in result.stderr  # the summary goes to stderr, not into the JSON
    toml = run_cli(*NODE, "--export", "-")
    assert toml.stdout.startswith("schema_version = ")  # TOML stays the default


def test_prometheus_passes_promtool_and_names_what_a_dashboard_needs(faulty: Path) -> None:
    result = run_cli("check", str(faulty), "--format", "prometheus")
    assert result.returncode == 2
    checked = promtool_check(result.stdout)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    text = result.stdout
    assert (
        'gpudiag_findings{rule="GPU001",subject="GPU 7",severity="critical",action="service"} 1'
    ) in text
    assert re.search(r'^gpudiag_gpu_up\{gpu="7",uuid=""\} 0$', text, re.M)
    assert re.search(
        r'^gpudiag_gpu_remapped_rows_pending\{gpu="1",uuid="GPU-[^"]+"\} 1$', text, re.M
    )
    assert re.search(r'^gpudiag_gpu_pcie_link_width\{gpu="3",uuid="[^"]+"\} 8$', text, re.M)
    assert re.search(r'^gpudiag_gpu_sm_clock_max_hertz\{gpu="0",[^}]+\} 1980000000\.0$', text, re.M)
    assert "gpudiag_status 2\n" in text
    assert 'gpudiag_recommended_action{action="service"} 1\n' in text
    assert 'gpudiag_recommended_action{action="drain"} 0\n' in text
    assert 'gpudiag_findings_by_severity{severity="critical"} 2\n' in text  # GPU001, GPU011
    assert 'gpudiag_gpu_temperature_celsius{gpu="7"' not in text  # a lost GPU: no zero
    created = load(faulty).created
    stamp = re.search(r"^gpudiag_snapshot_timestamp_seconds (\S+)$", text, re.M)
    assert stamp and float(stamp.group(1)) > 1.7e9, created
    # promtool is a real check: a broken line fails it
    broken = text.replace("gpudiag_status 2", "gpudiag_status two")
    assert promtool_check(broken).returncode != 0


def test_prometheus_kernel_results_and_not_applicable_findings(
    faulty: Path, tmp_path: Path
) -> None:
    snapshot = load(faulty)
    stats = Statistics(5, 24.5, 24.0, 25.0, 24.5, 0.012, 24.1, 24.9)
    kernels = (
        KernelResult(
            "stream", "cpu-numa0", "triad.fp64", "GB/s", ProbeStatus.OK, (24.5,) * 5, stats
        ),
        KernelResult("copy", "cpu", "h2d", "GB/s", ProbeStatus.SKIPPED, error="needs a GPU"),
    )
    na = Finding("NVL008", Severity.NOT_APPLICABLE, "GPU 0", "t", "no NVSwitch")
    assert is_not_applicable(na)
    snapshot = replace(snapshot, kernels=kernels, findings=(*snapshot.findings, na))
    text = prometheus(snapshot)
    checked = promtool_check(text)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert (
        'gpudiag_kernel_bandwidth_bytes_per_second{kernel="stream",device="cpu-numa0",'
        'metric="triad.fp64"} 24500000000.0'
    ) in text  # GB/s in bytes per second, the unit in the name, never a label
    assert 'gpudiag_kernel_ok{kernel="copy",device="cpu",metric="h2d"} 0' in text
    assert "gpudiag_kernel_median" not in text and 'unit="' not in text
    assert 'gpudiag_kernel_bandwidth_bytes_per_second{kernel="copy"' not in text  # no number
    assert 'rule="NVL008"' not in text  # did not apply: counted, not exported
    assert 'status="' not in text
    before = re.search(r"^gpudiag_rules_not_applicable (\d+)$", prometheus(load(faulty)), re.M)
    after = re.search(r"^gpudiag_rules_not_applicable (\d+)$", text, re.M)
    assert before and after and int(after.group(1)) == int(before.group(1)) + 1
    assert 'gpudiag_findings_by_severity{severity="info"} 11\n' in text  # not counted
    report = tmp_path / "na.xml"
    report.write_text(junit(snapshot, load_rules()))
    (suite,) = list(JUnitXml.fromfile(str(report)))
    (case,) = [c for c in suite if c.classname == "gpudiag.NVL008" and c.name == "GPU 0"]
    assert isinstance(case.result[0], Skipped) and case.result[0].message == "no NVSwitch"


def test_prometheus_file_is_written_atomically_and_refuses_a_folder(
    faulty: Path, tmp_path: Path
) -> None:
    target = tmp_path / "gpudiag.prom"
    target.write_text("old\n")
    result = run_cli("check", str(faulty), "--prometheus", str(target))
    assert result.returncode == 2
    assert "CRITICAL GPU001" in result.stdout  # check still prints its report
    assert promtool_check(target.read_text()).returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpudiag.prom"]  # no temp left
    folder = tmp_path / "dir.prom"
    folder.mkdir()
    refused = run_cli("check", str(faulty), "--prometheus", str(folder))
    assert refused.returncode == 3
    assert refused.stderr == f"gpudiag: --prometheus {folder}: is a directory\n"
    export = run_cli(*NODE, "--export", str(tmp_path / "n.json"), "--prometheus", str(target))
    assert export.returncode == 2
    assert "gpudiag_status 2" in target.read_text()
    lone = run_cli("--format", "json")
    assert lone.returncode == 3 and "--format and --prometheus go with --export" in lone.stderr


def test_junit_parses_with_one_case_per_rule_and_subject(faulty: Path, tmp_path: Path) -> None:
    target = tmp_path / "report.xml"
    result = run_cli("check", str(faulty), "--format", "junit")
    assert result.returncode == 2
    target.write_text(result.stdout)
    (suite,) = list(JUnitXml.fromfile(str(target)))
    cases = {(c.classname, c.name): c for c in suite}
    assert len(cases) == suite.tests  # one per rule and subject, no duplicates
    findings = load(faulty).findings
    failing = {
        (f"gpudiag.{f.rule_id}", f.subject)
        for f in findings
        if f.severity in (Severity.CRITICAL, Severity.WARNING)
    }
    unknown = {
        (f"gpudiag.{f.rule_id}", f.subject) for f in findings if f.severity is Severity.UNKNOWN
    }
    assert {k for k, c in cases.items() if c.result and isinstance(c.result[0], Failure)} == failing
    assert {k for k, c in cases.items() if c.result and isinstance(c.result[0], Error)} == unknown
    assert suite.failures == len(failing) == 10  # incl. NVL007: GPU 4's link at half speed
    lost = cases[("gpudiag.GPU001", "GPU 7")].result[0]
    assert isinstance(lost, Failure) and lost.type == "critical"
    assert "action: service" in lost.text
    skipped = [k for k, c in cases.items() if c.result and isinstance(c.result[0], Skipped)]
    assert ("gpudiag.GPU004", "GPU 7") in skipped  # the lost GPU's other checks
    assert cases[("gpudiag.GPU004", "GPU 0")].is_passed
    assert cases[("gpudiag.PCIE001", "GPU 3")].result[0].message == "GPU 3 PCIe link x8 of x16"


def test_a_target_that_is_not_a_regular_file_is_refused(faulty: Path, tmp_path: Path) -> None:
    """The rename of an atomic write would replace a device or a pipe (as root, even
    /dev/null): refused, and left as it was. A FIFO stands in for the device."""
    fifo = tmp_path / "metrics.prom"
    os.mkfifo(fifo)
    for args in (
        ["check", str(faulty), "--prometheus", str(fifo)],
        [*NODE, "--export", str(fifo), "--format", "json"],
        [*NODE, "--export", str(fifo)],
    ):
        result = run_cli(*args)
        assert result.returncode == 3, result.stderr
        assert result.stderr.endswith(
            f" {fifo}: is a FIFO, not a regular file; refusing to replace it ('-' writes to"
            " stdout)\n"
        ), result.stderr
        assert stat.S_ISFIFO(fifo.stat().st_mode)


HOSTILE = 'gpu"node\\07\nrack|3'  # a quote, a backslash, a newline and a pipe
# as a one-line field holds it (inputs.one_line: a host, a device, a subject): the newline
# a space, the quote, backslash and pipe as they are
HOSTILE_LINE = one_line(HOSTILE)


def _label_values(line: str) -> dict[str, str]:
    """A sample line's labels, read as the exposition format defines them (a second
    reading, written here: a value is quoted, and inside it only \\\\, \\" and \\n are
    escapes); an unescaped quote or a raw newline cannot be read back."""
    assert "\n" not in line
    labels: dict[str, str] = {}
    body = line[line.index("{") + 1 : line.rindex("}")]
    i = 0
    while i < len(body):
        name_end = body.index('="', i)
        name, i, value = body[i:name_end], name_end + 2, []
        while body[i] != '"':
            if body[i] == "\\":
                value.append({"\\": "\\", '"': '"', "n": "\n"}[body[i + 1]])
                i += 2
            else:
                value.append(body[i])
                i += 1
        labels[name] = "".join(value)
        i += 2 if body[i + 1 : i + 2] == "," else 1
    return labels


def test_prometheus_label_values_with_quotes_backslashes_and_newlines(faulty: Path) -> None:
    """Host names, kernel devices and metrics come from the node: each is escaped so
    that promtool accepts the file and every label reads back as it was."""
    snapshot = load(faulty)
    stats = Statistics(5, 24.5, 24.0, 25.0, 24.5, 0.012, 24.1, 24.9)
    kernel = KernelResult("stream", HOSTILE, 'tri"ad\\', "GB/s", ProbeStatus.OK, (24.5,) * 5, stats)
    odd = Finding("SITE001", Severity.WARNING, HOSTILE, "t", "m")
    snapshot = replace(
        snapshot, host=HOSTILE, kernels=(kernel,), findings=(*snapshot.findings, odd)
    )
    text = prometheus(snapshot)
    checked = promtool_check(text)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    samples = [line for line in text.splitlines() if not line.startswith("#")]
    (info,) = [_label_values(s) for s in samples if s.startswith("gpudiag_info{")]
    assert info["host"] == HOSTILE_LINE
    (median,) = [
        _label_values(s)
        for s in samples
        if s.startswith("gpudiag_kernel_bandwidth_bytes_per_second{")
    ]
    assert median == {"kernel": "stream", "device": HOSTILE_LINE, "metric": 'tri"ad\\'}
    found = [_label_values(s) for s in samples if s.startswith("gpudiag_findings{")]
    assert {"rule": "SITE001", "subject": HOSTILE_LINE}.items() <= found[-1].items()


def test_junit_keeps_quotes_newlines_and_markup_in_names_and_messages(
    faulty: Path, tmp_path: Path
) -> None:
    snapshot = load(faulty)
    message = 'GPU "7" <lost> & gone\nsecond line \\ |'
    odd = Finding("SITE001", Severity.CRITICAL, HOSTILE, "t", message)
    snapshot = replace(snapshot, host=HOSTILE, findings=(*snapshot.findings, odd))
    report = tmp_path / "odd.xml"
    report.write_text(junit(snapshot, load_rules()))
    (suite,) = list(JUnitXml.fromfile(str(report)))
    assert suite.name == f"gpudiag {HOSTILE_LINE}"
    (case,) = [c for c in suite if c.classname == "gpudiag.SITE001"]
    assert case.name == HOSTILE_LINE
    assert isinstance(case.result[0], Failure) and case.result[0].message == message
    assert f"critical: {message}" in case.result[0].text
