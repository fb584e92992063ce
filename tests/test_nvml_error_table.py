"""Every NVML call the driver and GPU probes make, made to fail with each of NotSupported,
FunctionNotFound, GpuIsLost, Unknown and InsufficientSize, one call at a time, through
the real pynvml and the C stand-in libnvidia-ml (tests/nvml_standin/, not a GPU), and
judged by the shipped rules. For every case: no reading "no probe produced it"; no false
OK (GpuIsLost from any call on a GPU is GPU001 CRITICAL on it; a failed reading a rule
needs is never judged fine); no false CRITICAL or WARNING (a call that fails otherwise
raises no alarm the healthy node did not have, beyond GPU001 where the GPU is lost).

One stand-in build; all cases (about 280) in one subprocess, the recording rewritten
between them (the stand-in reads it at each nvmlInit): about 15 s, for every call the
probes make with every failure, which no smaller table covers."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from gpudiag import tomlcompat
from gpudiag.rulefile import load_rules

from conftest import REPO
from standin import build, environment, flatten, run_python

CODES = ("NotSupported", "FunctionNotFound", "GpuIsLost", "Unknown", "InsufficientSize")
ALARMS = ("critical", "warning")

# Runs the driver and GPU probes for each case (argv: a JSON file of [name, flat file]),
# judges them, and prints {name: {"findings": [[rule, severity, subject, message]],
# "failed": [[key, status, reason]], "ok": {key: value}}} as JSON.
SCRIPT = """
import json, os, sys
from gpudiag.hostfs import HostFS
from gpudiag.model import Snapshot
from gpudiag.nvml import Nvml, PynvmlBackend
from gpudiag.probe import ProbeContext
from gpudiag.probes import driver, gpu
from gpudiag.rulefile import load_rules
from gpudiag.session import probe_node, with_findings
rules = load_rules()
out = {}
for name, flat in json.load(open(sys.argv[1])):
    os.environ["GPUDIAG_STANDIN_DATA"] = flat
    nvml = Nvml(PynvmlBackend())
    context = ProbeContext(host=HostFS(sys.argv[2]), nvml=nvml)
    results = probe_node([driver.PROBE, gpu.PROBE], context)
    nvml.close()
    snapshot = with_findings(Snapshot(host="standin", created="", gpudiag_version="",
                                      command_line=(), probes=tuple(results)), rules, None)
    readings = [r for p in results for r in p.readings]
    out[name] = {
        "probes": [[p.name, p.status.value, p.error] for p in results],
        "findings": [[f.rule_id, f.severity.value, f.subject, f.message]
                     for f in snapshot.findings],
        "failed": [[r.key, r.status.value, r.reason] for r in readings if not r.ok],
        "ok": {r.key: r.value for r in readings if r.ok},
    }
print(json.dumps(out))
"""


def recording() -> dict[str, Any]:
    """The healthy HGX H100 demo, two of its GPUs (NVLinks, fabric, topology, P2P)."""
    data = tomlcompat.loads((REPO / "snapshots" / "demo-hgx-h100-healthy.toml").read_text())
    data["devices"] = data["devices"][:2]
    for device in data["devices"]:
        for function in ("nvmlDeviceGetTopologyCommonAncestor", "nvmlDeviceGetP2PStatus"):
            device[function] = {
                k: v for k, v in device[function].items() if k.split(",")[0] in ("0", "1")
            }
    return data


def failing(data: dict[str, Any], table: str, function: str, code: str) -> dict[str, Any]:
    """The recording with every call of `function` (GPU 0's, or the system's) failing."""
    changed = copy.deepcopy(data)
    where = changed["system"] if table == "system" else changed["devices"][0]
    value = where.get(function)
    error = {"error": code}
    if (
        isinstance(value, dict)
        and "error" not in value
        and all(isinstance(k, str) and k[:1].isdigit() for k in value)
    ):
        where[function] = {key: error for key in value}  # each argument's call fails
    else:
        where[function] = error
    return changed


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every case's findings and readings, and the healthy baseline's under 'healthy'."""
    base = tmp_path_factory.mktemp("error-table")
    library = build("current", base / "lib")
    data = recording()
    data["system"]["nvmlDeviceGetCount"] = 2
    cases: list[tuple[str, dict[str, Any]]] = [("healthy", data)]
    for table, functions in (("system", data["system"]), ("device", data["devices"][0])):
        for function in functions:
            cases += [
                (f"{function}:{code}", failing(data, table, function, code)) for code in CODES
            ]
    listed = []
    for number, (name, recorded) in enumerate(cases):
        flat = base / f"case{number}.flat"
        flat.write_text(flatten(recorded))
        listed.append([name, str(flat)])
    (base / "cases.json").write_text(json.dumps(listed))
    (base / "root").mkdir()
    env = environment(library, base / "case0.flat", base / "calls.log")
    result = run_python(SCRIPT, env, str(base / "cases.json"), str(base / "root"), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def test_the_table_covers_every_call_and_code(outcomes) -> None:
    names = [n for n in outcomes if n != "healthy"]
    assert len(names) == len({n.split(":")[0] for n in names}) * len(CODES) > 200
    assert all(p[1] == "ok" for case in outcomes.values() for p in case["probes"])


def test_no_reading_is_left_without_its_reason(outcomes) -> None:
    """Of the rules judging what NVML gives (the host's are not probed here), none is
    told 'no probe produced it': the producer says what it skipped and why."""
    said = [
        (name, finding)
        for name, case in outcomes.items()
        for finding in case["findings"]
        if finding[0] in NVML_RULES and "no probe produced it" in finding[3]
    ]
    assert said == []


def test_a_gpu_lost_by_any_call_is_gpu001(outcomes) -> None:
    """No false OK: GpuIsLost from any of GPU 0's calls is GPU001 CRITICAL on GPU 0."""
    missed = []
    for name, case in outcomes.items():
        function, _, code = name.partition(":")
        if code != "GpuIsLost" or not function.startswith("nvmlDevice") or "Count" in function:
            continue
        gpu001 = [f for f in case["findings"] if f[0] == "GPU001" and f[2] == "GPU 0"]
        if [f[1] for f in gpu001] != ["critical"] or "GpuIsLost" not in gpu001[0][3]:
            missed.append(name)
    assert missed == []


def test_no_failed_call_raises_a_false_alarm(outcomes) -> None:
    """No false CRITICAL or WARNING: a call that fails (lost GPU aside) raises no alarm
    that the healthy node did not have."""
    healthy = {(f[0], f[2]) for f in outcomes["healthy"]["findings"] if f[1] in ALARMS}
    assert healthy == set()  # the healthy demo has no alarm: any alarm below is new
    false = {}
    for name, case in outcomes.items():
        function, _, code = name.partition(":")
        lost = code == "GpuIsLost" or (code == "Unknown" and function == "nvmlDeviceGetPciInfo")
        alarms = [
            f
            for f in case["findings"]
            if f[1] in ALARMS and not (lost and f[0] == "GPU001" and f[2] == "GPU 0")
        ]
        if alarms:
            false[name] = alarms
    assert false == {}


def test_no_failed_reading_is_judged_fine(outcomes) -> None:
    """No false OK: a reading that was taken on the healthy node and fails now is never
    passed by a rule as if read. Each failed key a warning or critical rule judges shows
    as a finding (UNKNOWN, not applicable, or GPU001's lost GPU), never as silence."""
    healthy_ok = outcomes["healthy"]["ok"]
    silent = {}
    for name, case in outcomes.items():
        if name == "healthy":
            continue
        subjects = {f[2] for f in case["findings"] if f[0] == "GPU001"}
        judged = {(f[0], f[2]) for f in case["findings"]}
        for key, _status, _reason in case["failed"]:
            if key not in healthy_ok or not key.startswith("gpu.0."):
                continue
            if "GPU 0" in subjects:
                continue  # the lost GPU: GPU001 speaks for it, once
            gpu_rules = RULES_BY_KEY.get(key.replace("gpu.0.", "gpu.{gpu}.", 1), ())
            quiet = [rule for rule in gpu_rules if (rule, "GPU 0") not in judged]
            if quiet:
                silent.setdefault(name, []).append((key, quiet))
    assert silent == {}


def _rules_by_key() -> dict[str, tuple[str, ...]]:
    found: dict[str, list[str]] = {}
    for rule in SHIPPED:
        if rule.severity.value in ALARMS and rule.applies_to == "gpu" and not rule.disabled:
            found.setdefault(rule.reading, []).append(rule.id)
    return {k: tuple(v) for k, v in found.items()}


SHIPPED = load_rules()
RULES_BY_KEY = _rules_by_key()
NVML_RULES = {r.id for r in SHIPPED if r.reading.startswith(("gpu.", "nvml.", "topo.gpu."))}


def test_topology_through_links_of_unknown_type_is_uncertain_never_a_guess(outcomes) -> None:
    """Where nvmlDeviceGetNvLinkRemoteDeviceType is missing (FunctionNotFound), GPUs joined
    through NVSwitches would fall from NV18 to a PCIe level: the pair says it is
    uncertain instead, and nothing else is guessed."""
    assert outcomes["healthy"]["ok"]["topo.gpu.0.1"] == "NV18"
    case = outcomes["nvmlDeviceGetNvLinkRemoteDeviceType:FunctionNotFound"]
    assert "topo.gpu.0.1" not in case["ok"] and "topo.gpu.1.0" not in case["ok"]
    failed = {key: (status, reason) for key, status, reason in case["failed"]}
    status, reason = failed["topo.gpu.0.1"]
    assert status == "missing" and reason.startswith("uncertain: GPU 0 has NVLinks to devices")
