"""Issue 36, points 1-6: what support and bring-up engineers paste, imported as the
readings the rules judge. Each case is a real file (../shared/realdata) or a shape taken
from a public source named in tests/fixtures/pastes/README.md; an edit made in a test
to make a fault is named there."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudiag.importing import ImportError_, import_files, import_text
from gpudiag.model import ReadingStatus, Severity, Snapshot
from gpudiag.rulefile import load_rules
from gpudiag.session import with_findings

from conftest import realdata_dir, run_cli

PASTES = Path(__file__).parent / "fixtures" / "pastes"
BAD_NVLINK = "nvlink/azurehpc__bad_nvlink_status__A100-SXM4-80GB.txt"
H100_TOPO = "topo/nvgpuexp__linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01__topo-m__1gpu.txt"


def _readings(text: str) -> dict:
    return {r.key: r for r in import_text(text)[1]}


def _judged(*paths: Path, profile: str | None = None) -> Snapshot:
    return with_findings(import_files([str(p) for p in paths]), load_rules(), profile)


def _fired(snapshot: Snapshot) -> dict[str, Severity]:
    judged = (Severity.CRITICAL, Severity.WARNING, Severity.INFO, Severity.UNKNOWN)
    return {f.rule_id: f.severity for f in snapshot.findings if f.severity in judged}


# ------------------------------------------------------------------ 1: every link down


def test_all_links_inactive_on_an_sxm_part_is_critical() -> None:
    snapshot = _judged(realdata_dir() / BAD_NVLINK)
    r = snapshot.readings_by_key
    assert r["gpu.6.name"].value == "NVIDIA A100-SXM4-80GB"  # the header line's name
    assert r["gpu.6.uuid"].value == "GPU-9667d95e-6d22-0c22-1f57-c481f13e7c44"
    assert r["node.profile"].value == "a100-sxm4-80gb"  # the model, from the name
    assert r["gpu.6.nvlink.active"].value == 0
    fired = _fired(snapshot)
    assert fired["NVL011"] is Severity.CRITICAL
    assert fired["NVL006"] is Severity.WARNING  # 0 of the model's 12
    # the healthy file of the same upstream test: 12 of 12 links, no NVLink finding
    good = _judged(realdata_dir() / BAD_NVLINK.replace("bad_", "good_"))
    assert not {k for k in _fired(good) if k.startswith("NVL")}


def test_all_links_inactive_on_a_geforce_card_is_no_finding() -> None:
    # the RTX 2080 SUPER prints the same line: a card without bridges, not a fault
    name = "nvgpuexp__linux-x86_64__nvidia-geforce-rtx-2080-super__595.71.05__nvlink-s.txt"
    fired = _fired(_judged(realdata_dir() / "nvlink" / name))
    assert "NVL011" not in fired and "NVL006" not in fired


# ------------------------------------------------------------------ 2: nvlink -e


def test_nvlink_error_counters_are_counters_per_link() -> None:
    text = (PASTES / "nvlink-e__h100.txt").read_text()
    kind, readings = import_text(text)
    r = {x.key: x for x in readings}
    assert kind == "nvlink-e"
    for link in (0, 1, 17):
        for counter in ("replay", "recovery", "crc_flit"):
            assert r[f"gpu.0.nvlink.{link}.errors.{counter}"].value == 0
    # no link is made of a counter line, and the elided links 2-16 are not there at all
    assert not [k for k in r if k.endswith((".state", ".speed", ".active", ".count"))]
    assert not [k for k in r if k.startswith(("gpu.0.nvlink.2.", "gpu.0.nvlink.16."))]
    # edit: 3 CRC errors on link 17 -> NVL002 fires on that link
    edited = text.replace("Link 17: CRC Errors: 0", "Link 17: CRC Errors: 3")
    assert _readings(edited)["gpu.0.nvlink.17.errors.crc_flit"].value == 3


def test_nvlink_status_and_error_counters_in_one_file(tmp_path: Path) -> None:
    status = (realdata_dir() / BAD_NVLINK.replace("bad_", "good_")).read_text()
    errors = (PASTES / "nvlink-e__h100.txt").read_text().replace("GPU 0:", "GPU 7:")
    errors = errors.replace("Link 1: Replay Errors: 0", "Link 1: Replay Errors: 5")
    source = tmp_path / "both.txt"
    source.write_text(status + errors)
    snapshot = _judged(source)
    r = snapshot.readings_by_key
    assert r["gpu.7.nvlink.active"].value == 12 and r["gpu.7.nvlink.count"].value == 12
    assert r["gpu.7.nvlink.1.errors.replay"].value == 5
    assert "NVL004" in _fired(snapshot)


# ------------------------------------------------------------------ 3: topo -m residue


def test_topo_underline_residue_without_escape_is_stripped() -> None:
    real = (realdata_dir() / H100_TOPO).read_text()
    assert "\x1b[4m" in real
    # edit: the ESC bytes dropped, as a web page or an environment dump keeps the text
    pasted = real.replace("\x1b", "")
    r = _readings(pasted)
    assert r == _readings(real)
    assert r["gpu.0.cpu_affinity"].value == "0-19" and r["gpu.0.numa_node"].value == 0


def test_topo_row_is_never_taken_for_the_header() -> None:
    real = (realdata_dir() / H100_TOPO).read_text()
    # edit: the header line lost (a paste that starts at the GPU0 row)
    rows = "\n".join(line for line in real.splitlines() if "GPU0\tCPU" not in line)
    with pytest.raises(ImportError_, match="without its header line"):
        import_text(rows)


# ------------------------------------------------------------------ 5: still unread


def test_topo_gpu_numa_id_of_a_grace_node() -> None:
    r = _readings((PASTES / "topo-m__gb200__sglang-11208.txt").read_text())
    assert [r[f"gpu.{g}.memory_numa_node"].value for g in range(3)] == [2, 10, 18]
    assert r["topo.gpu.0.1"].value == "NV18" and r["gpu.2.cpu_affinity"].value == "72-143"
    h100 = _readings((realdata_dir() / H100_TOPO).read_text())
    assert h100["gpu.0.memory_numa_node"].status is ReadingStatus.UNSUPPORTED  # N/A


def test_elided_nvlink_status_is_not_a_count() -> None:
    r = _readings((PASTES / "nvlink-s__h100__elided.txt").read_text())
    assert r["gpu.0.nvlink.0.speed"].value == 26.562 and r["gpu.0.nvlink.17.state"].ok
    for key in ("gpu.0.nvlink.count", "gpu.0.nvlink.active"):
        assert r[key].status is ReadingStatus.MISSING and "cut" in r[key].reason


# ------------------------------------------------------------------ 4: -q cut at its end

H100_Q = "nvidia-smi-q/nvgpuexp__linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01__idle.txt"


def _cut_after(line: str) -> str:
    """The real H100 -q, cut right after the line that starts with `line` (edit: the
    paste ends there, its last line whole)."""
    lines = (realdata_dir() / H100_Q).read_text().splitlines()
    at = next(i for i, x in enumerate(lines) if x.startswith(line))
    return "\n".join(lines[: at + 1]) + "\n"


def test_a_q_paste_cut_at_its_end_keeps_the_whole_blocks() -> None:
    # the cut falls on the first line after a whole Clocks Event Reasons block
    r = _readings(_cut_after("    Clocks Event Reasons Counters"))
    assert r["gpu.0.throttle_reasons"].value == ["GpuIdle"]  # 'Idle : Active', read
    # cut inside Remapped Rows: the lines before the cut are whole, read as shown
    r = _readings(_cut_after("            High "))
    assert r["gpu.0.remapped_rows.pending"].value is False
    assert r["gpu.0.ecc.current"].value is True and r["gpu.0.memory.total"].value == 81559
    # what the cut can hide is unknown: the sections after it
    assert r["gpu.0.temperature.gpu"].status is ReadingStatus.MISSING
    assert "stops part-way" in r["gpu.0.temperature.gpu"].reason
    # cut inside the reasons block itself: not known, and says what its whole lines show
    r = _readings(_cut_after("        Sync Boost ")).get("gpu.0.throttle_reasons")
    assert r is not None and r.status is ReadingStatus.MISSING
    assert "stops part-way" in r.reason and "GpuIdle" in r.reason


def test_pre_470_ecc_mode_label_is_read() -> None:
    # driver 418.67 prints the section as 'Ecc Mode' (a V100-SXM2, pasted with its '...')
    r = _readings((PASTES / "q__v100-sxm2__418.67__princeton.txt").read_text())
    assert r["gpu.0.ecc.current"].value is True and r["gpu.0.ecc.pending"].value is True
    assert r["gpu.0.ecc.volatile.uncorrected"].value == 0  # its pre-R450 printed total
    assert r["gpu.0.pcie.link_width"].value == 2  # the paste's x2 link of x16, as printed


def test_mig_devices_of_a_q_x_file() -> None:
    # nvidia-smi -q -x of an A100-SXM4-80GB in MIG mode, four 1g.20gb devices (driver 535)
    kind, readings = import_text(
        (PASTES / "q-x__a100-sxm4-mig__535.54.03__telegraf.xml").read_text()
    )
    r = {x.key: x for x in readings}
    assert kind == "xml" and r["gpu.0.mig.current"].value is True
    assert r["gpu.0.mig.instances"].value == [f"GI {g} / CI 0: 19968 MiB" for g in (3, 4, 5, 6)]


# ------------------------------------------------------------------ 6: bring-up pastes


def test_fabric_section_in_progress_is_critical() -> None:
    snapshot = _judged(PASTES / "fabric__in-progress__gpu-operator-2511.txt")
    r = snapshot.readings_by_key
    assert r["gpu.0.fabric.state"].value == "in-progress"
    assert "names no GPU" in r["gpu.0.pci.bus_id"].reason  # which GPU is not in the paste
    assert _fired(snapshot)["NVL008"] is Severity.CRITICAL
    # edit: grep -A prints each GPU's section, '--' between them: GPU 1 registered
    text = (PASTES / "fabric__in-progress__gpu-operator-2511.txt").read_text()
    r = _readings(text + "--\n" + text.replace("In Progress", "Completed"))
    assert r["gpu.0.fabric.state"].value == "in-progress"
    assert r["gpu.1.fabric.state"].value == "completed"


def test_fabric_completed_with_insufficient_resources_is_critical() -> None:
    snapshot = _judged(PASTES / "fabric__insufficient-resources__azhpc-images-506.txt")
    assert snapshot.readings_by_key["gpu.0.fabric.status"].value == "Insufficient Resources"
    fired = _fired(snapshot)
    assert fired["NVL009"] is Severity.CRITICAL and "NVL008" not in fired


def test_kernel_log_xid_lines_are_the_fault_readings() -> None:
    snapshot = _judged(PASTES / "kernel-log__xid__open-gpu-kernel-modules-1150.txt")
    r = snapshot.readings_by_key
    assert r["faults.xid.total"].value == 7 and r["faults.xid.codes"].value == [45]
    assert r["faults.xid.45.gpus"].value == [
        "0000:97:00.0", "0000:ba:00.0", "0000:dc:00.0", "0000:ed:00.0"
    ]  # fmt: skip
    assert _fired(snapshot)["GPU026"] is Severity.WARNING
    # edit: the line, an Xid 63 (row remapping) -> a hardware fault, GPU027
    line = "kernel: NVRM: Xid (PCI:0000:10:1c): 63, pid='<unknown>', name=<unknown>, Row Remapper\n"
    r = _readings(line)
    assert r["faults.xid.codes"].value == [63] and r["faults.xid.63.gpus"].value == ["0000:10:1c.0"]


def test_dcgmi_diag_table_is_per_test_verdicts_with_their_rule() -> None:
    snapshot = _judged(PASTES / "dcgmi-diag-r3__8x-h100__nccl-tests-264.txt")
    r = snapshot.readings_by_key
    assert r["dcgm.diag.gpu_memory"].value == "Fail - All"
    assert r["dcgm.diag.denylist"].value == "Pass" and r["dcgm.diag.pcie"].value == "Skip - All"
    assert "dcgm.diag.dcgm_version" not in r and "dcgm.diag.info" not in r  # no tests
    assert r["dcgm.diag.failed"].value == ["GPU Memory"]
    (warning, _) = r["dcgm.diag.warnings"].value  # the wrapped rows joined as printed
    assert "Check DCGM and system logs" in warning and "'system not yet initialized'" in warning
    assert _fired(snapshot)["DCGM001"] is Severity.CRITICAL
    # a host rule does not apply, in words that name what was imported
    assert any(
        f.message.endswith("an import of a dcgmi diag table holds") for f in snapshot.findings
    )
    # edit: every test passed -> DCGM001 stays quiet
    passed = (PASTES / "dcgmi-diag-r3__8x-h100__nccl-tests-264.txt").read_text()
    passed = passed.replace("Fail - All", "Pass - All")
    assert _readings(passed)["dcgm.diag.failed"].value == []


def test_dcgm_rule_is_explained() -> None:
    from gpudiag.commands.rules import explain_rule

    (rule,) = [r for r in load_rules() if r.id == "DCGM001"]
    text = explain_rule(rule)
    assert text.startswith("DCGM001 (critical, stable): dcgmi diag test failed")
    assert "dcgm.diag.failed" in text and "made by import" in text


@pytest.mark.parametrize(
    ("text", "looks"),
    [
        ('{"gpus": []}', "it looks like JSON: 1 line"),
        ("+-----+\n| NVIDIA-SMI 560.35.03 |\n", "nvidia-smi's summary table"),
        ("index, name, memory.total\n0, NVIDIA H100, 81559 MiB\n", "CSV"),
        ("hello\nworld\n", "it looks like text: 2 lines, starting 'hello'"),
    ],
)
def test_anything_else_says_what_it_looks_like(text: str, looks: str) -> None:
    with pytest.raises(ImportError_, match="not an nvidia-smi") as refused:
        import_text(text)
    assert looks in str(refused.value) and "\n" not in str(refused.value)


# ------------------------------------------------------------------ what the user sees


def test_cli_import_of_pasted_faults_is_critical(tmp_path: Path) -> None:
    """End to end, as a user types it: the azurehpc bad nvlink -s file (issue 36's first
    ticket: OK, exit 0 before), a Fabric section and a dcgmi diag table imported at once."""
    result = run_cli(
        "import",
        str(realdata_dir() / BAD_NVLINK),
        str(PASTES / "fabric__insufficient-resources__azhpc-images-506.txt"),
        str(PASTES / "dcgmi-diag-r3__8x-h100__nccl-tests-264.txt"),
        "-o",
        str(tmp_path / "x.json"),
    )
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    # the host: the first file's name, where the files name none (docs/rules.md)
    assert lines[0].startswith("azurehpc__bad_nvlink_status__A100-SXM4-80GB: 3 probes (3 ok)")
    assert any(line.startswith("CRITICAL NVL011   GPU 6: ") for line in lines)
    assert any(line.startswith("CRITICAL NVL009   GPU 0: ") for line in lines)
    assert any(
        line.startswith("CRITICAL DCGM001  node: dcgmi diag failed: GPU Memory") for line in lines
    )
    refused = run_cli("import", str(PASTES / "README.md"), "-o", str(tmp_path / "y.json"))
    assert refused.returncode == 3 and refused.stdout == ""
    (line,) = refused.stderr.splitlines()
    assert "README.md: not an nvidia-smi" in line and "it looks like text" in line


def test_a_bug_report_bundle_brings_its_kernel_log_xids() -> None:
    # edit: the real H100 -q, then a kernel log with dmesg's seconds since boot, as an
    # nvidia-bug-report.log bundles them (the Xid line is open-gpu-kernel-modules 1150's)
    q = (realdata_dir() / H100_Q).read_text()
    log = "[ 4711.250000] NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001\n"
    kind, readings = import_text(q + "\n" + log)
    r = {x.key: x for x in readings}
    assert kind == "q" and r["gpu.0.name"].value == "NVIDIA H100 80GB HBM3"
    assert r["faults.xid.codes"].value == [45] and r["faults.xid.45.last_seen"].value == 4711.25
    assert "faults.xid.total" not in _readings(q)  # a -q alone holds no kernel log
