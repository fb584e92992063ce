"""Imports that a new user's review found wrong: a gpu-burn log's verdict, an import
nothing could check, impossible values, partial files, conflicting files, the file's
own host and time, derived thresholds and a gzip bomb."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudiag.importing import ImportError_, import_files
from gpudiag.model import Severity, Snapshot
from gpudiag.rulefile import load_rules
from gpudiag.session import with_findings

from conftest import realdata_dir

BURN = "benchmarks/superbench__gpu_burn__8x-A100-SXM4-80GB.log"


def _judged(*paths: Path | str) -> Snapshot:
    return with_findings(import_files([str(p) for p in paths]), load_rules())


def _burn(tmp_path: Path, old: str, new: str) -> Path:
    text = (realdata_dir() / BURN).read_text()
    assert old in text
    path = tmp_path / "burn.log"
    path.write_text(text.replace(old, new))
    return path


def test_a_faulty_gpu_in_a_gpu_burn_log_is_a_critical_finding(tmp_path: Path) -> None:
    snapshot = _judged(_burn(tmp_path, "GPU 3: OK", "GPU 3: FAULTY"))
    critical = [f for f in snapshot.findings if f.severity is Severity.CRITICAL]
    assert [(f.rule_id, f.subject) for f in critical] == [("KRN001", "GPU 3")]
    readings = snapshot.readings_by_key
    assert readings["gpu.3.kernel.verified"].value is False
    assert readings["gpu.2.kernel.verified"].value is True


def test_a_healthy_gpu_burn_log_is_checked(tmp_path: Path) -> None:
    snapshot = _judged(realdata_dir() / BURN)
    assert not [f for f in snapshot.findings if f.severity.rank >= Severity.UNKNOWN.rank]
    assert sum(k.endswith(".kernel.verified") for k in snapshot.readings_by_key) == 8


def test_a_gpu_burn_log_without_its_verdict_is_refused(tmp_path: Path) -> None:
    text = (realdata_dir() / BURN).read_text()
    path = tmp_path / "cut.log"
    path.write_text(text[: text.index("Tested 8 GPUs")])
    with pytest.raises(ImportError_, match="without its verdict"):
        import_files([str(path)])


def test_an_import_nothing_could_check_is_unknown_not_a_pass(tmp_path: Path) -> None:
    path = tmp_path / "list.txt"  # nvidia-smi -L: names and UUIDs, nothing a rule judges
    path.write_text("".join((realdata_dir() / BURN).read_text().splitlines(True)[:2]))
    findings = _judged(path).findings
    unknown = [f for f in findings if f.severity is Severity.UNKNOWN]
    assert [f.rule_id for f in unknown] == ["IMPORT001"]
    assert "no verdict on the node" in unknown[0].message


H100_XML = "h100-vm/nvidia-smi-q-x.xml"


def _edited(tmp_path: Path, source: str, *edits: tuple[str, str], name: str = "f.xml") -> Path:
    text = (realdata_dir() / source).read_text()
    for old, new in edits:
        assert old in text
        text = text.replace(old, new, 1)
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("temperature", "power"),
    [("99999 C", "1e400 W"), ("-99999999999999999999 C", "131.03 W"), ("151 C", "5601 W")],
)
def test_impossible_values_are_errors_not_ok(tmp_path: Path, temperature: str, power: str) -> None:
    path = _edited(
        tmp_path,
        H100_XML,
        ("<gpu_temp>45 C</gpu_temp>", f"<gpu_temp>{temperature}</gpu_temp>"),
        ("<instant_power_draw>131.03 W", f"<instant_power_draw>{power}"),
    )
    readings = import_files([str(path)]).readings_by_key
    keys = ["temperature.gpu"]
    for key in keys if power == "131.03 W" else [*keys, "power.draw"]:
        reading = readings[f"gpu.0.{key}"]
        assert reading.status.value == "error", (key, reading)
        assert reading.value is None
        assert "physically" in reading.reason or "nvidia-smi prints" in reading.reason
    assert readings["gpu.0.temperature.slowdown_tlimit"].value == -2  # relative: may be < 0
    # printed only relative to T.Limit: unsupported, whatever the temperature
    assert readings["gpu.0.temperature.slowdown"].status.value == "unsupported"


def test_values_at_the_physical_bounds_are_kept(tmp_path: Path) -> None:
    path = _edited(
        tmp_path,
        H100_XML,
        ("<gpu_temp>45 C</gpu_temp>", "<gpu_temp>0 C</gpu_temp>"),
        ("<instant_power_draw>131.03 W", "<instant_power_draw>5600 W"),
    )
    readings = import_files([str(path)]).readings_by_key
    assert readings["gpu.0.temperature.gpu"].value == 0
    assert readings["gpu.0.power.draw"].value == 5600.0


def test_a_partial_healthy_xml_is_not_unknown_what_it_does_not_hold_did_not_apply() -> None:
    """telegraf's trimmed -q -x (power_readings without a limit, pci without max_link_*,
    temperature without thresholds): those rules did not apply (docs/rules.md), not
    unknown; what it holds is judged."""
    snapshot = _judged(realdata_dir() / "nvidia-smi-xml/telegraf__gtx-1070-ti.xml")
    bad = [f for f in snapshot.findings if f.severity.rank >= Severity.UNKNOWN.rank]
    assert not bad, [f.said() for f in bad]
    by_rule = {f.rule_id: f for f in snapshot.findings}
    for rule in ("GPU016", "GPU018", "PCIE001"):
        assert by_rule[rule].severity is Severity.NOT_APPLICABLE
    assert snapshot.readings_by_key["gpu.0.temperature.gpu"].value == 39
    assert "gpu.0.power.limit" not in snapshot.readings_by_key


def test_files_of_two_machines_are_refused_and_the_same_file_is_read_once() -> None:
    xml = realdata_dir() / "nvidia-smi-xml"
    t4, v100 = xml / "telegraf__tesla-t4.xml", xml / "datakit__gtx-1card__V100-PCIE-32GB.xml"
    with pytest.raises(ImportError_, match=r"conflict: gpu\.0\.\w+ is 'Tesla V100-PCIE-32GB'"):
        import_files([str(t4), str(v100)])
    assert len(import_files([str(t4), str(t4)]).probes) == 1
    h100 = realdata_dir() / "h100-vm"  # one machine's -q -x, -q and topo -m: one snapshot
    both = import_files([str(h100 / "nvidia-smi-q-x.xml"), str(h100 / "nvidia-smi-q.txt")])
    assert len(both.probes) == 2


def test_an_import_takes_the_files_time_and_a_host_from_the_file_or_its_name(
    tmp_path: Path,
) -> None:
    xml = import_files([str(realdata_dir() / "nvidia-smi-xml/telegraf__tesla-t4.xml")])
    assert (xml.host, xml.created) == ("telegraf__tesla-t4", "2023-04-24T16:22:39Z")
    q = import_files([str(realdata_dir() / "h100-vm/nvidia-smi-q.txt")])
    assert q.created == "2026-11-24T23:37:56Z"  # 'Timestamp : Tue Nov 24 23:37:56 2026'
    named = _edited(
        tmp_path,
        "nvidia-smi-xml/telegraf__tesla-t4.xml",
        ("<driver_version>", "<hostname>node017</hostname><driver_version>"),
        name="anything.xml.gz.txt",
    )
    assert import_files([str(named)]).host == "node017"


def test_a_gzip_bomb_is_refused_at_the_limit_without_holding_it(tmp_path: Path) -> None:
    """16 MiB of zeros, gzipped, against an 8 MiB limit: refused, and no more than a step
    of the unpacking held on the way (the whole 8 MiB, twice, before)."""
    import tracemalloc
    import zlib

    from gpudiag.inputs import InputError, read_input

    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(1 << 20)
    bomb = b"".join(packer.compress(zeros) for _ in range(16)) + packer.flush()
    path = tmp_path / "bomb.log.gz"
    path.write_bytes(bomb)
    tracemalloc.start()
    try:
        with pytest.raises(InputError, match="unpacked, larger than"):
            read_input(path, gzip_ok=True, max_bytes=8 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 << 20, peak
    small = tmp_path / "small.log.gz"  # one within the limit is unpacked whole
    small.write_bytes(zlib.compress(b"GPU 0: x\\n" * 1000, wbits=16 + zlib.MAX_WBITS))
    assert read_input(small, gzip_ok=True, max_bytes=8 << 20) == b"GPU 0: x\\n" * 1000
