"""Import of nvidia-smi outputs: every real file in ../shared/realdata, values asserted."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpudiag.importing import ImportError_, detect, import_text
from gpudiag.importing.common import status_of
from gpudiag.importing.query_text import parse_q_text
from gpudiag.model import Reading, ReadingStatus

from conftest import REALDATA, realdata_dir, run_cli

# file: (GPU count, GPU 0 name, PCIe gen, width, persistence, ECC, SM clock, power limit,
#        throttle reasons). None: the file says N/A (unsupported); "absent": no such field.
# fmt: off
XML = {
    'datakit__gtx-1050-1.xml': (1, 'NVIDIA GeForce GTX 1050', 3, 8, True, None, 683, None, ['GpuIdle']),
    'datakit__gtx-1card__V100-PCIE-32GB.xml': (1, 'Tesla V100-PCIE-32GB', 3, 16, False, True, 1380, 250.0, []),
    'telegraf__3090-v13.xml': (1, 'NVIDIA GeForce RTX 3090', 1, 16, True, None, 210, 350.0, ['SwPowerCap']),
    'telegraf__a10g.xml': (1, 'NVIDIA A10G', 1, 8, False, True, 210, 300.0, ['GpuIdle']),
    'telegraf__dual_2070-v13.xml': (2, 'NVIDIA GeForce RTX 2070', 1, 8, True, None, 300, 175.0, ['GpuIdle']),
    'telegraf__dual_2080-v13.xml': (2, 'NVIDIA GeForce RTX 2080', 1, 8, True, None, 300, 215.0, ['GpuIdle']),
    'telegraf__dual_a5000-v13.xml': (2, 'NVIDIA RTX A5000', 1, 16, True, False, 210, 230.0, ['GpuIdle']),
    'telegraf__gt-1030.xml': (1, 'NVIDIA GeForce GT 1030', 3, 4, False, None, 1265, 30.0, ['GpuIdle']),
    'telegraf__gtx-1070-ti.xml': (1, 'GeForce GTX 1070 Ti', 1, 16, 'absent', 'absent', 135, 'absent', 'absent'),
    'telegraf__gtx-1660-ti.xml': (1, 'Graphics Device', 1, 16, False, None, 300, 130.0, ['GpuIdle']),
    'telegraf__pro-6000-maxq-blackwell-v13.xml': (1, 'NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition', 1, 16, True, False, 180, 300.0, []),
    'telegraf__quadro-p2000-v12.xml': (1, 'Quadro P2000', 1, 8, True, None, 139, 75.0, ['GpuIdle']),
    'telegraf__quadro-p400.xml': (1, 'Quadro P400', 1, 16, False, None, 139, None, ['GpuIdle']),
    'telegraf__rtx-3060-v12.xml': (1, 'NVIDIA GeForce RTX 3060', 1, 16, True, None, 210, 170.0, ['GpuIdle']),
    'telegraf__rtx-3080-v12.xml': (1, 'NVIDIA GeForce RTX 3080', 4, 16, None, None, 210, 336.0, ['GpuIdle']),
    'telegraf__rtx-3080-v13.xml': (1, 'NVIDIA GeForce RTX 3080', 4, 16, False, None, 1950, 320.0, []),
    'telegraf__rtx-3090-v12.xml': (1, 'NVIDIA GeForce RTX 3090', 1, 16, True, None, 0, 200.0, ['GpuIdle']),
    'telegraf__rtx-4000-sff-ada-v13.xml': (1, 'NVIDIA RTX 4000 SFF Ada Generation', 1, 16, True, False, 210, 70.0, ['GpuIdle']),
    'telegraf__tesla-t4.xml': (1, 'Tesla T4', 3, 8, False, True, 585, 70.0, []),
    'telegraf__tesla_p4.xml': (1, 'GRID P4-1Q', None, None, None, None, 0, None, []),
}
_2080 = "NVIDIA GeForce RTX 2080 SUPER"
_H100 = "NVIDIA H100 80GB HBM3"
TEXT = {
    'nvgpuexp__linux-x86_64__nvidia-geforce-rtx-2080-super__595.71.05__idle.txt': (1, _2080, 1, 16, False, None, 300, 250.0, ['GpuIdle']),
    'nvgpuexp__linux-x86_64__nvidia-geforce-rtx-2080-super__595.71.05__load.txt': (1, _2080, 3, 16, False, None, 2055, 250.0, []),
    'nvgpuexp__linux-x86_64__nvidia-geforce-rtx-2080-super__610.57.04__idle.txt': (1, _2080, 1, 16, False, None, 300, 250.0, ['GpuIdle']),
    'nvgpuexp__linux-x86_64__nvidia-geforce-rtx-2080-super__610.57.04__load.txt': (1, _2080, 3, 16, False, None, 2070, 250.0, []),
    'nvgpuexp__linux-x86_64__nvidia-geforce-rtx-4080-super__595.71.05__idle.txt': (1, 'NVIDIA GeForce RTX 4080 SUPER', 1, 16, False, None, 210, 320.0, ['GpuIdle']),
    'nvgpuexp__linux-x86_64__nvidia-geforce-rtx-4080-super__595.71.05__load.txt': (1, 'NVIDIA GeForce RTX 4080 SUPER', 4, 16, False, None, 2805, 320.0, []),
    'nvgpuexp__linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01__idle.txt': (1, _H100, 5, 16, True, True, 345, 700.0, ['GpuIdle']),
    'nvgpuexp__linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01__load.txt': (1, _H100, 5, 16, True, True, 1980, 700.0, []),
    'nvgpuexp__linux-x86_64__nvidia-h100-mig__590.48.01__idle.txt': (1, _H100, 5, 16, True, True, 345, 700.0, ['GpuIdle']),
    'nvgpuexp__linux-x86_64__nvidia-h100-mig__590.48.01__load.txt': (1, _H100, 5, 16, True, True, 1980, 700.0, []),
    'nvgpuexp__linux-x86_64__nvidia-h200-mig__590.48.01__idle.txt': (1, 'NVIDIA H200', 5, 16, True, True, 345, 700.0, ['GpuIdle']),
    'nvgpuexp__linux-x86_64__nvidia-h200-mig__590.48.01__load.txt': (1, 'NVIDIA H200', 5, 16, True, True, 1980, 700.0, []),
    'nvgpuexp__linux-x86_64__nvidia-l40s__595.80__idle.txt': (1, 'NVIDIA L40S', 4, 16, False, True, 2520, 350.0, []),
    'nvgpuexp__linux-x86_64__nvidia-l40s__595.80__load.txt': (1, 'NVIDIA L40S', 4, 16, False, True, 2520, 350.0, []),
    'nvgpuexp__windows-x86_64__nvidia-geforce-rtx-2080-super__591.86__idle.txt': (1, _2080, 3, 16, None, None, 300, 250.0, ['GpuIdle']),
    'nvgpuexp__windows-x86_64__nvidia-geforce-rtx-2080-super__591.86__load.txt': (1, _2080, 3, 16, None, None, 2055, 250.0, []),
    'nvgpuexp__windows-x86_64__nvidia-geforce-rtx-2080-super__610.62__idle.txt': (1, _2080, 3, 16, None, None, 300, 250.0, ['GpuIdle']),
    'nvgpuexp__windows-x86_64__nvidia-geforce-rtx-2080-super__610.62__load.txt': (1, _2080, 3, 16, None, None, 2040, 250.0, []),
}
# fmt: on
FIELDS = (
    "name",
    "pcie.link_gen",
    "pcie.link_width",
    "persistence_mode",
    "ecc.current",
    "clocks.sm",
    "power.limit",
    "throttle_reasons",
)


def _by_key(readings: list[Reading]) -> dict[str, Reading]:
    return {r.key: r for r in readings}


# The two-GPU files: each GPU's bus address (every field in the table above is the same on
# both GPUs of these files, read from the files themselves).
BUS_IDS = {
    "telegraf__dual_2070-v13.xml": ["0000:01:00.0", "0000:02:00.0"],
    "telegraf__dual_2080-v13.xml": ["0000:01:00.0", "0000:02:00.0"],
    "telegraf__dual_a5000-v13.xml": ["0000:81:00.0", "0000:c1:00.0"],
}


def _check(readings: dict[str, Reading], expected: tuple, name: str = "") -> None:
    count, *values = expected
    assert sum(1 for k in readings if k.endswith(".health")) == count
    assert count == 1 or name in BUS_IDS, f"{name}: say each GPU's bus address in BUS_IDS"
    if name in BUS_IDS:
        assert [readings[f"gpu.{i}.pci.bus_id"].value for i in range(count)] == BUS_IDS[name]
    for gpu in range(count):  # every GPU, not only the first
        for suffix, want in zip(FIELDS, values, strict=True):
            reading = readings.get(f"gpu.{gpu}.{suffix}")
            if want == "absent":  # missing from its section, or its whole section left out
                assert reading is None or reading.status is ReadingStatus.MISSING, (gpu, suffix)
                continue
            assert reading is not None, (gpu, suffix)
            if want is None:
                assert reading.status is ReadingStatus.UNSUPPORTED, (gpu, suffix, reading)
            else:
                assert reading.value == want, (gpu, suffix, reading)


def _every(folder: str) -> list:
    """Every file in a realdata folder; where the folder is absent, one skipped case that
    says why (pytest would otherwise report only 'got empty parameter set')."""
    if not REALDATA.is_dir():
        reason = f"shared real-world data not found at {REALDATA} (set GPUDIAG_REALDATA)"
        return [pytest.param(None, marks=pytest.mark.skip(reason=reason), id="no-realdata")]
    return sorted((REALDATA / folder).glob("*"))


def test_expectations_cover_every_real_file() -> None:
    base = realdata_dir()
    assert sorted(p.name for p in (base / "nvidia-smi-xml").glob("*.xml")) == sorted(XML)
    names = {p.name for p in (base / "nvidia-smi-q").glob("*.txt")}
    assert sorted(names - set(TEXT)) == [
        "azurehpc__bad_nvsmi8_output__EDITED_fault_injected.txt",
        "azurehpc__orig_nvsmi8_output__q-d-PAGE_RETIREMENT_8gpu_535.86.10.txt",
    ]


@pytest.mark.parametrize("name", sorted(XML))
def test_xml_files(name: str) -> None:
    kind, readings = import_text((realdata_dir() / "nvidia-smi-xml" / name).read_text())
    assert kind == "xml"
    _check(_by_key(readings), XML[name], name)


@pytest.mark.parametrize("name", sorted(TEXT))
def test_q_text_files(name: str) -> None:
    kind, readings = import_text((realdata_dir() / "nvidia-smi-q" / name).read_text())
    assert kind == "q"
    _check(_by_key(readings), TEXT[name], name)


def test_xml_details() -> None:
    text = (realdata_dir() / "nvidia-smi-xml" / "telegraf__a10g.xml").read_text()
    v = {k: r.value for k, r in _by_key(import_text(text)[1]).items() if r.ok}
    assert v["nvml.driver_version"] == "515.105.01"
    assert v["gpu.0.pci.device_id"] == "0x0000"  # the file holds 000000DE (masked upstream)
    assert v["gpu.0.pcie.max_link_gen"] == 4 and v["gpu.0.pcie.max_link_width"] == 16
    assert v["gpu.0.memory.total"] == 23028


def test_page_retirement_query_of_eight_gpus() -> None:
    base = realdata_dir() / "nvidia-smi-q"
    good = _by_key(
        import_text(
            (
                base / "azurehpc__orig_nvsmi8_output__q-d-PAGE_RETIREMENT_8gpu_535.86.10.txt"
            ).read_text()
        )[1]
    )
    assert good["nvml.gpu_count"].value == 8
    assert good["gpu.7.retired_pages.double_bit"].value == 0
    assert good["gpu.7.retired_pages.pending"].value is False
    # a -d query prints only its section: the rest is left out (such a file cannot hold
    # it, so its rules do not apply), never zero
    assert "gpu.0.name" not in good and "gpu.0.ecc.volatile.uncorrected" not in good
    bad = _by_key(
        import_text((base / "azurehpc__bad_nvsmi8_output__EDITED_fault_injected.txt").read_text())[
            1
        ]
    )
    assert [bad[f"gpu.{i}.retired_pages.single_bit"].value for i in range(8)] == [
        60,
        2,
        0,
        6,
        0,
        20,
        0,
        8,
    ]
    assert [bad[f"gpu.{i}.retired_pages.double_bit"].value for i in range(8)] == [
        5,
        61,
        0,
        0,
        0,
        45,
        0,
        56,
    ]
    assert [bad[f"gpu.{i}.retired_pages.pending"].value for i in range(8)] == [
        False,
        True,
        False,
        True,
        False,
        True,
        False,
        True,
    ]


TOPO = {
    "2080-super__595": "0-23",
    "2080-super__610.57": "0-23",
    "4080-super": "0-15",
    "h100-80gb": "0-19",
    "h100-mig": "0-19",
    "h200-mig": "0-23",
    "l40s": "0-7",
}


@pytest.mark.parametrize("path", _every("topo"), ids=lambda p: getattr(p, "name", None))
def test_topo_files(path: Path) -> None:
    text = path.read_text(errors="replace")
    if "ERROR: Option -m is missing its value" in text:
        with pytest.raises(ImportError_, match="holds an nvidia-smi error"):
            import_text(text)
        return
    kind, readings = import_text(text)
    by_key = _by_key(readings)
    assert kind == "topo"
    # every GPU row of the file's matrix (rows start at the margin, the header after a tab;
    # read here with a plain pattern, not the importer)
    gpus = re.findall(r"^GPU(\d+)\s", re.sub(r"\x1b\[[0-9;]*m", "", text), re.M)
    assert gpus == ["0"]  # every real capture here is of one GPU: its matrix is the self cell
    pairs = [f"topo.gpu.{a}.{b}" for a in gpus for b in gpus if a != b]
    # exactly each GPU's affinity and NUMA node and a cell per pair: nothing invented
    fields = ("cpu_affinity", "numa_node", "memory_numa_node")  # 'GPU NUMA ID': N/A off Grace
    expected = {f"gpu.{g}.{field}" for g in gpus for field in fields}
    assert set(by_key) == expected | set(pairs)
    affinity = next((v for k, v in TOPO.items() if k in path.name), None)
    for gpu in gpus:
        if affinity is None:  # the Windows capture prints no affinity
            assert by_key[f"gpu.{gpu}.cpu_affinity"].status is ReadingStatus.UNSUPPORTED
            assert by_key[f"gpu.{gpu}.numa_node"].status is ReadingStatus.UNSUPPORTED
        else:
            assert by_key[f"gpu.{gpu}.cpu_affinity"].value == affinity
            assert by_key[f"gpu.{gpu}.numa_node"].value == 0
        assert by_key[f"gpu.{gpu}.memory_numa_node"].status is ReadingStatus.UNSUPPORTED


@pytest.mark.parametrize("path", _every("nvlink"), ids=lambda p: getattr(p, "name", None))
def test_nvlink_files(path: Path) -> None:
    kind, readings = import_text(path.read_text(errors="replace"))
    assert kind == "nvlink"
    by_key = _by_key(readings)
    if "h100-80gb" in path.name:
        assert by_key["gpu.0.nvlink.count"].value == 18
        assert by_key["gpu.0.nvlink.active"].value == 18
        assert by_key["gpu.0.nvlink.17.speed"].value == 26.562
    elif "good_nvlink" in path.name:
        assert by_key["gpu.7.nvlink.count"].value == 12
        assert by_key["gpu.7.nvlink.0.speed"].value == 25.0
    elif "bad_nvlink" in path.name:
        assert by_key["gpu.6.nvlink.active"].value == 0
        assert by_key["gpu.6.nvlink.count"].status is ReadingStatus.MISSING
    elif "all links are inActive" in path.read_text(errors="replace"):
        assert by_key["gpu.0.nvlink.active"].value == 0
    else:  # MIG mode, or a GPU without NVLink
        count = by_key["gpu.0.nvlink.count"]
        assert count.status is ReadingStatus.UNSUPPORTED
        assert "MIG" in count.reason or "does not have" in count.reason


def test_placeholders_become_statuses() -> None:
    assert status_of("N/A")[0] is ReadingStatus.UNSUPPORTED
    assert status_of("[Not Supported]")[0] is ReadingStatus.UNSUPPORTED
    assert status_of("Requested functionality has been deprecated")[0] is (
        ReadingStatus.UNSUPPORTED
    )
    assert status_of("[Insufficient Permissions]")[0] is ReadingStatus.NEEDS_ROOT
    assert status_of("[Unknown Error]")[0] is ReadingStatus.ERROR
    assert status_of("700.00 W") is None


def test_q_text_tree_nesting() -> None:
    text = (
        "Driver Version : 1\nGPU 00000000:18:00.0\n    PCI\n        GPU Link Info\n"
        "            PCIe Generation\n                Current : 5\n    Product Name : X\n"
    )
    header, gpus = parse_q_text(text)
    assert header == {"Driver Version": "1"}
    ((bus, tree),) = gpus
    assert bus == "00000000:18:00.0"
    assert tree.find("PCI/GPU Link Info/PCIe Generation/Current").value == "5"
    assert tree.find("Product Name").value == "X"


def test_bug_report_with_embedded_xml(tmp_path: Path) -> None:
    xml = (realdata_dir() / "nvidia-smi-xml" / "telegraf__tesla-t4.xml").read_text()
    report = tmp_path / "nvidia-bug-report.log"
    report.write_text("____\nStart of NVIDIA bug report log file.\n" + xml + "\n*** end\n")
    kind, readings = import_text(report.read_text())
    assert kind == "xml" and _by_key(readings)["gpu.0.name"].value == "Tesla T4"


def test_hostile_xml_is_refused() -> None:
    bomb = (
        '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;&a;">]>'
        "<nvidia_smi_log>&b;</nvidia_smi_log>"
    )
    with pytest.raises(ImportError_, match="not readable XML"):
        import_text(bomb)
    with pytest.raises(ImportError_):
        detect("hello world")


def test_cli_import_combines_files(tmp_path: Path) -> None:
    base = realdata_dir()
    out = tmp_path / "h100.toml"
    result = run_cli(
        "import",
        str(
            base / "nvidia-smi-q/nvgpuexp__linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01__idle.txt"
        ),
        str(
            base / "topo/nvgpuexp__linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01__topo-m__1gpu.txt"
        ),
        str(base / "nvlink/nvgpuexp__linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01__nvlink-s.txt"),
        "-o",
        str(out),
    )
    # an import holds no host readings: the host rules do not apply (counted apart, not
    # unknown), and these healthy H100 outputs hold nothing worse than info: exit 0
    assert result.returncode == 0, result.stdout + result.stderr
    first = result.stdout.splitlines()[0]
    assert "0 critical, 0 warning, 0 unknown, 1 info; rules: " in first
    assert first.endswith(" did not apply, 0 could not check")
    assert "did not apply here (no such evidence in the source): CPU001 " in result.stdout
    check = run_cli("check", str(out))
    assert check.returncode == 0
    assert check.stdout.splitlines()[0] == first
    from gpudiag.snapshot import load

    readings = load(out).readings_by_key
    assert readings["gpu.0.name"].value == "NVIDIA H100 80GB HBM3"
    assert readings["gpu.0.cpu_affinity"].value == "0-19"
    assert readings["gpu.0.nvlink.active"].value == 18


def test_cli_import_bad_file_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "x.txt"
    bad.write_text("hello\n")
    result = run_cli("import", str(bad), "-o", str(tmp_path / "out.toml"))
    assert result.returncode == 3
    assert result.stderr.count("\n") == 1 and str(bad) in result.stderr
    assert not (tmp_path / "out.toml").exists()
