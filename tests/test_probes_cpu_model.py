"""The CPU model where /proc/cpuinfo names none (Arm, as on Grace): py-cpuinfo on a live
node only, through the host's output seam, recorded in captures and answered by replays.

No Arm /proc/cpuinfo is among the real data (../shared/realdata has x86 only), so the Arm
file here is written after the layout the Linux arm64 kernel prints (Neoverse V2, the
Grace core: implementer 0x41, part 0xd4f)."""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from gpudiag.capture import CapturedHostFS, RecordingHostFS
from gpudiag.hostfs import HostFS
from gpudiag.model import Reading
from gpudiag.nvml import Nvml, ReplayBackend
from gpudiag.probe import ProbeContext
from gpudiag.probes import cpu

FIXTURES = Path(__file__).parent / "fixtures"
GRACE_BLOCK = (
    "processor\t: {n}\nBogoMIPS\t: 2000.00\n"
    "Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics sve sve2 bf16\n"
    "CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x0\n"
    "CPU part\t: 0xd4f\nCPU revision\t: 0\n"
)
ANSWER = {"brand_raw": "Neoverse-V2", "vendor_id_raw": "ARM"}


def arm_tree(root: Path) -> Path:
    """A host tree whose /proc/cpuinfo is an Arm one (4 CPUs) and nothing else of note."""
    (root / "proc").mkdir(parents=True)
    text = "\n".join(GRACE_BLOCK.format(n=n) for n in range(4))
    (root / "proc/cpuinfo").write_text(text)
    cpu_dir = root / "sys/devices/system/cpu"
    cpu_dir.mkdir(parents=True)
    (cpu_dir / "online").write_text("0-3\n")
    return root


def cpu_readings(host: HostFS) -> dict[str, Reading]:
    nvml = Nvml(ReplayBackend.from_file(FIXTURES / "replay-no-driver.toml"))
    context = ProbeContext(host=host, nvml=nvml, cancel=threading.Event())
    return {r.key: r for r in cpu.collect(context)}


def never_called() -> dict[str, str]:
    raise AssertionError("py-cpuinfo must not run here")


def test_under_root_py_cpuinfo_is_never_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cpu, "py_cpuinfo_identity", never_called)
    host = HostFS(arm_tree(tmp_path))
    assert not host.is_live
    readings = cpu_readings(host)
    assert (readings["cpu.vendor"].value, readings["cpu.model"].value) == ("ARM", "part 0xd4f")
    assert readings["cpu.model"].source == "procfs:cpuinfo"


def test_live_arm_node_asks_py_cpuinfo_and_a_capture_records_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []

    def fake_identity() -> dict[str, str]:
        calls.append(1)
        return dict(ANSWER)

    monkeypatch.setattr(cpu, "py_cpuinfo_identity", fake_identity)
    recording = RecordingHostFS(HostFS(arm_tree(tmp_path)))
    recording.is_live = True  # the Arm tree stands for this live node's files
    readings = cpu_readings(recording)
    assert calls == [1]
    assert readings["cpu.model"].value == "Neoverse-V2"
    assert readings["cpu.model"].source == "py-cpuinfo:lscpu"
    assert readings["cpu.vendor"].value == "ARM"  # the implementer code, from cpuinfo
    assert recording.record["outputs"][cpu.PY_CPUINFO_OUTPUT] == ANSWER

    # --replay: the recorded answer, py-cpuinfo not run
    monkeypatch.setattr(cpu, "py_cpuinfo_identity", never_called)
    replayed = cpu_readings(CapturedHostFS(recording.record, live=True, root_user=False))
    assert readings["cpu.model"].value == replayed["cpu.model"].value == "Neoverse-V2"

    # a capture without the answer (older gpudiag): the part number, no error
    del recording.record["outputs"][cpu.PY_CPUINFO_OUTPUT]
    older = cpu_readings(CapturedHostFS(recording.record, live=True, root_user=False))
    assert older["cpu.model"].value == "part 0xd4f"

    # a capture of a tree (--root) was not live: never asked, even if recorded
    recording.record["outputs"][cpu.PY_CPUINFO_OUTPUT] = ANSWER
    tree = cpu_readings(CapturedHostFS(recording.record, live=False, root_user=False))
    assert tree["cpu.model"].value == "part 0xd4f"


def test_live_arm_node_where_py_cpuinfo_has_no_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cpu, "py_cpuinfo_identity", lambda: {"failed": "lscpu is missing"})
    host = HostFS(arm_tree(tmp_path))
    host.is_live = True
    assert cpu_readings(host)["cpu.model"].value == "part 0xd4f"


def test_x86_with_a_model_name_never_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu, "py_cpuinfo_identity", never_called)
    text = (Path("/proc/cpuinfo")).read_text()
    if "model name" not in text:
        pytest.skip("this machine's /proc/cpuinfo has no model name (not x86)")
    readings = cpu_readings(HostFS("/"))
    assert readings["cpu.model"].source == "procfs:cpuinfo"


@pytest.mark.skipif(shutil.which("lscpu") is None, reason="lscpu (util-linux) not installed")
def test_real_py_cpuinfo_lscpu_source_on_this_machine() -> None:
    """The real py-cpuinfo, its lscpu source only: the model lscpu prints here."""
    answer = cpu.py_cpuinfo_identity()
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    match = re.search(r"^Model name:\s*(.+)$", lscpu, re.MULTILINE)
    assert match, lscpu
    assert answer["brand_raw"] == match.group(1).strip()
