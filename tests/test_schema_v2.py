"""Snapshot schema version 2: written always, version 1 files (made by the round-1 code,
kept in tests/fixtures/schema-v1) load and are migrated, not-applicable findings."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from gpudiag import snapshot as snapfile
from gpudiag import tomlcompat
from gpudiag.model import SCHEMA_VERSION, Finding, Severity, Snapshot
from gpudiag.session import exit_code

from conftest import FIXTURES, run_cli

V1 = FIXTURES / "schema-v1"
V1_EXPORT = V1 / "demo-faulty-export.toml"  # gpudiag --export of the faulty demo, version 1
V1_IMPORT = V1 / "a10g-import.json"  # gpudiag import of telegraf__a10g.xml, version 1


def test_version_1_files_are_version_1() -> None:
    assert V1_EXPORT.read_text().startswith("schema_version = 1\n")
    assert json.loads(V1_IMPORT.read_text())["schema_version"] == 1


def test_version_1_export_loads_as_version_2() -> None:
    snapshot = snapfile.load(V1_EXPORT)
    assert SCHEMA_VERSION == 2
    assert snapshot.schema_version == 2
    assert snapshot.host == "gpunode01"
    assert [p.name for p in snapshot.probes][:3] == ["host", "cpu", "numa"]
    # the recorded findings are kept as they were
    assert len(snapshot.findings) == 38
    assert snapshot.worst_severity() is Severity.CRITICAL
    assert snapshot.reading("gpu.3.pcie.link_width").value == 8
    # a live export already had the ECC totals: nothing added but what gpudiag has since
    # learned to read (gpudiag/upgrade.py): the GPUs' recovery actions, saying so
    raw = tomlcompat.loads(V1_EXPORT.read_text())
    added = {k for k, r in snapshot.readings_by_key.items() if "derived on load" in r.source}
    assert added == {f"gpu.{gpu}.recovery_action" for gpu in range(7)}  # GPU 7 was lost
    assert len(snapshot.readings_by_key) == raw["end"]["readings"] + len(added)


def test_version_1_import_gains_the_ecc_totals_the_rules_read() -> None:
    snapshot = snapfile.load(V1_IMPORT)
    assert snapshot.schema_version == 2
    total = snapshot.reading("gpu.0.ecc.volatile.uncorrected")
    assert total is not None and total.value == 0
    assert total.source.startswith("sum of nvidia-smi-xml:gpu[0]/ecc_errors/volatile/dram_")
    assert snapshot.reading("gpu.0.ecc.aggregate.corrected").value == 0


def test_version_1_import_with_uncorrectable_errors_is_critical_on_check(tmp_path: Path) -> None:
    data = json.loads(V1_IMPORT.read_text())
    (probe,) = data["probes"]
    for reading in probe["readings"]:
        if reading["key"] == "gpu.0.ecc.volatile.uncorrected.dram":
            reading["value"] = 2
    edited = tmp_path / "ticket.json"
    edited.write_text(json.dumps(data))
    result = run_cli("check", str(edited))
    assert result.returncode == 2, result.stdout + result.stderr
    assert (
        "CRITICAL GPU007   GPU 0: 2 uncorrectable ECC errors since the driver loaded"
        in result.stdout
    )


def test_check_of_a_version_1_export() -> None:
    result = run_cli("check", str(V1_EXPORT))
    assert result.returncode == 2, result.stderr
    assert result.stdout.startswith("gpunode01: 11 probes (11 ok)")


def test_only_version_2_is_written(tmp_path: Path) -> None:
    snapshot = snapfile.load(V1_EXPORT)
    snapfile.save(snapshot, tmp_path / "again.toml")
    snapfile.save(snapshot, tmp_path / "again.json")
    assert (tmp_path / "again.toml").read_text().startswith("schema_version = 2\n")
    assert json.loads((tmp_path / "again.json").read_text())["schema_version"] == 2
    assert snapfile.load(tmp_path / "again.toml") == snapfile.load(tmp_path / "again.json")


def _with_not_applicable() -> Snapshot:
    base = snapfile.load(V1_IMPORT)
    finding = Finding(
        "CPU001", Severity.NOT_APPLICABLE, "node", "t", "does not apply: cpu.freq.governor"
    )
    return replace(base, findings=(*base.findings, finding))


def test_not_applicable_round_trips_and_never_sets_the_exit_code(tmp_path: Path) -> None:
    snapshot = _with_not_applicable()
    snapfile.save(snapshot, tmp_path / "n.toml")
    again = snapfile.load(tmp_path / "n.toml")
    assert again == snapshot
    assert 'severity = "not-applicable"' in (tmp_path / "n.toml").read_text()
    only = (again.findings[-1],)
    assert exit_code(only) == 0
    assert replace(again, findings=only).worst_severity() is None


def test_version_1_cannot_hold_not_applicable() -> None:
    text = snapfile.dumps(_with_not_applicable()).replace(
        "schema_version = 2", "schema_version = 1", 1
    )
    with pytest.raises(snapfile.SnapshotError, match="schema version 1 has no 'not-applicable'"):
        snapfile.loads(text, "old.toml")


def test_unknown_versions_are_refused() -> None:
    text = V1_EXPORT.read_text().replace("schema_version = 1", "schema_version = 3", 1)
    with pytest.raises(snapfile.SnapshotError, match="this gpudiag reads 1 and 2"):
        snapfile.loads(text, "future.toml")


def test_version_1_import_of_a_pre_r450_file_gets_no_guessed_total() -> None:
    from gpudiag.importing.gpus import with_ecc_totals
    from gpudiag.model import Reading

    base = "nvidia-smi-xml:gpu[0]/ecc_errors/volatile/double_bit"
    v1 = (
        Reading("gpu.0.ecc.volatile.uncorrected.dram", 0, source=f"{base}/device_memory"),
        Reading("gpu.0.ecc.volatile.uncorrected.sram", 3, source=f"{base}/register_file"),
    )
    (total,) = with_ecc_totals(v1)[2:]
    assert total.key == "gpu.0.ecc.volatile.uncorrected" and total.value is None
    assert "pre-R450" in total.reason
