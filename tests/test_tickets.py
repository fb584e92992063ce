"""Issue 15, tickets tell the truth: ECC counts in imports, rules that do not apply to
an import, what a healthy import exits with. Values are asserted against the real files
in ../shared/realdata; where a fault is needed, a real file is edited in the test and
the edit is named."""

from __future__ import annotations

from pathlib import Path

from gpudiag.model import ReadingStatus, Severity
from gpudiag.nvsmi import import_text
from gpudiag.ruleengine import load_rules
from gpudiag.session import with_findings
from gpudiag.snapshot import load

from conftest import realdata_dir, run_cli

A10G = "nvidia-smi-xml/telegraf__a10g.xml"
H100_Q = "nvidia-smi-q/nvgpuexp__linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01__idle.txt"
V100_XML = "nvidia-smi-xml/datakit__gtx-1card__V100-PCIE-32GB.xml"
BLACKWELL_XML = "nvidia-smi-xml/telegraf__pro-6000-maxq-blackwell-v13.xml"


def _text(name: str) -> str:
    return (realdata_dir() / name).read_text()


def _readings(text: str) -> dict:
    return {r.key: r for r in import_text(text)[1]}


def test_xml_ecc_counts_and_totals_of_the_a10g() -> None:
    r = _readings(_text(A10G))
    for counter in ("volatile", "aggregate"):
        for kind in ("corrected", "uncorrected"):
            assert r[f"gpu.0.ecc.{counter}.{kind}.dram"].value == 0
            assert r[f"gpu.0.ecc.{counter}.{kind}.sram"].value == 0
            assert r[f"gpu.0.ecc.{counter}.{kind}"].value == 0  # what GPU007/GPU008 read


def test_xml_uncorrectable_dram_errors_are_critical(tmp_path: Path) -> None:
    # edit: the A10G capture with 2 volatile DRAM uncorrectable errors (issue 15's case)
    text = _text(A10G)
    volatile = text.index("<volatile>")
    edited = text[:volatile] + text[volatile:].replace(
        "<dram_uncorrectable>0</dram_uncorrectable>",
        "<dram_uncorrectable>2</dram_uncorrectable>",
        1,
    )
    assert edited != text
    r = _readings(edited)
    assert r["gpu.0.ecc.volatile.uncorrected"].value == 2
    assert r["gpu.0.ecc.aggregate.uncorrected"].value == 0
    source = tmp_path / "a10g.xml"
    source.write_text(edited)
    result = run_cli("import", str(source), "-o", str(tmp_path / "s.toml"))
    assert result.returncode == 2, result.stdout + result.stderr
    assert (
        "CRITICAL GPU007   GPU 0: GPU 0: 2 uncorrectable ECC errors since the driver loaded"
        in result.stdout
    )


def test_q_text_sram_parity_and_sec_ded_are_both_counted() -> None:
    text = _text(H100_Q)
    # the real file: every count 0, SRAM uncorrectable printed split (driver 590)
    r = _readings(text)
    assert r["gpu.0.ecc.volatile.uncorrected.sram"].value == 0
    assert r["gpu.0.ecc.volatile.uncorrected"].value == 0
    assert "SRAM Uncorrectable Parity" in r["gpu.0.ecc.volatile.uncorrected.sram"].source
    # edit: 1 parity and 2 SEC-DED volatile errors
    volatile = text.index("        Volatile\n")
    head, tail = text[:volatile], text[volatile:]
    tail = tail.replace(
        "SRAM Uncorrectable Parity                  : 0",
        "SRAM Uncorrectable Parity                  : 1",
        1,
    )
    tail = tail.replace(
        "SRAM Uncorrectable SEC-DED                 : 0",
        "SRAM Uncorrectable SEC-DED                 : 2",
        1,
    )
    r = _readings(head + tail)
    assert r["gpu.0.ecc.volatile.uncorrected.sram"].value == 3
    assert r["gpu.0.ecc.volatile.uncorrected"].value == 3
    assert r["gpu.0.ecc.aggregate.uncorrected"].value == 0
    snapshot = _snapshot_of(head + tail)
    (ecc,) = [f for f in snapshot.findings if f.rule_id == "GPU007"]
    assert ecc.severity is Severity.CRITICAL and "3 uncorrectable" in ecc.message


def _snapshot_of(text: str):
    from datetime import datetime, timezone

    from gpudiag.model import ProbeResult, ProbeStatus, Snapshot

    kind, readings = import_text(text)
    probe = ProbeResult(f"import-{kind}", ProbeStatus.OK, 0.0, tuple(readings))
    now = datetime.now(timezone.utc).isoformat()
    return with_findings(Snapshot("imported", now, "test", probes=(probe,)), load_rules())


def test_pre_r450_xml_counts_by_unit_and_prints_its_total() -> None:
    r = _readings(_text(V100_XML))
    assert r["gpu.0.ecc.volatile.uncorrected"].value == 0
    assert r["gpu.0.ecc.volatile.uncorrected"].source.endswith("volatile/double_bit/total")
    assert r["gpu.0.ecc.volatile.uncorrected.dram"].value == 0
    assert r["gpu.0.ecc.volatile.uncorrected.sram"].status is ReadingStatus.MISSING


def test_ecc_off_card_counts_are_unsupported_not_zero() -> None:
    r = _readings(_text(BLACKWELL_XML))
    assert r["gpu.0.ecc.current"].value is False
    total = r["gpu.0.ecc.volatile.uncorrected"]
    assert total.status is ReadingStatus.UNSUPPORTED and total.value is None


def test_remapped_rows_printed_as_one_placeholder_are_unsupported() -> None:
    text = _text(
        "nvidia-smi-q/nvgpuexp__linux-x86_64__nvidia-geforce-rtx-2080-super__595.71.05__idle.txt"
    )
    assert "    Remapped Rows                                      : N/A" in text
    r = _readings(text)
    for name in ("correctable", "uncorrectable", "pending", "failure"):
        assert r[f"gpu.0.remapped_rows.{name}"].status is ReadingStatus.UNSUPPORTED


def test_thresholds_printed_only_relative_to_t_limit_are_unsupported() -> None:
    r = _readings(_text(H100_Q))
    slowdown = r["gpu.0.temperature.slowdown"]
    assert slowdown.status is ReadingStatus.UNSUPPORTED
    assert slowdown.reason == "nvidia-smi prints it only relative to T.Limit (-2 C)"


def test_q_text_processes_by_type() -> None:
    name = "nvidia-smi-q/nvgpuexp__linux-x86_64__nvidia-geforce-rtx-2080-super__595.71.05__load.txt"
    r = _readings(_text(name))
    assert r["gpu.0.processes.graphics"].value[:2] == [1696, 4584]
    assert 5267 in r["gpu.0.processes.compute"].value
    assert 5267 not in r["gpu.0.processes.graphics"].value
    assert _readings(_text(H100_Q))["gpu.0.processes.compute"].value == []


def test_host_rules_do_not_apply_to_an_import_and_a_healthy_one_exits_0(tmp_path: Path) -> None:
    out = tmp_path / "h100.toml"
    result = run_cli("import", str(realdata_dir() / H100_Q), "-o", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    first = result.stdout.splitlines()[0]
    assert "findings: 0 critical, 0 warning, 0 unknown, 1 info; rules: " in first
    assert "UNKNOWN" not in result.stdout and "NOT-APPLICABLE" not in result.stdout
    snapshot = load(out)
    na = {f.rule_id for f in snapshot.findings if f.severity is Severity.NOT_APPLICABLE}
    assert {"CPU001", "MEM001", "OS001", "GPU002", "HOST001", "NVL006"} <= na
    assert all(
        not f.rule_id.startswith(("CPU", "MEM", "OS", "HOST"))
        for f in snapshot.findings
        if f.severity is not Severity.NOT_APPLICABLE
    )
