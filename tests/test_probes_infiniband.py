"""The InfiniBand/RoCE probe (probes/infiniband.py): values from the real trees in
../shared/realdata, failures on hand-made trees, its rules (rules/infiniband.toml) on
both, the diff's rising counters, redaction of the GUIDs and the host screen's group."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from gpudiag import catalog, shipped, views
from gpudiag.hostfs import HostFS
from gpudiag.model import Reading, ReadingStatus, Severity
from gpudiag.nvml import Nvml, ReplayBackend
from gpudiag.probe import ProbeContext
from gpudiag.probes import infiniband
from gpudiag.ruleengine import evaluate
from gpudiag.rulefile import load_rules
from gpudiag.snapshot import load

from conftest import FIXTURES, run_cli
from hosttree import add_infiniband, build_hgx_tree, ib_port_files, write_hca

NODE_EXPORTER = "node_exporter__collector__fixtures__sys"
PROCFS = "procfs__testdata__fixtures"
REPLAY = str(FIXTURES / "replay-no-driver.toml")


def _probe(root: Path) -> dict[str, Reading]:
    context = ProbeContext(
        host=HostFS(root, is_root_user=True), nvml=Nvml(ReplayBackend.from_file(REPLAY))
    )
    readings = list(infiniband.collect(context))
    by_key = {r.key: r for r in readings}
    assert len(by_key) == len(readings)  # no key twice
    return by_key


def _findings(readings: dict[str, Reading]) -> dict[tuple[str, str], object]:
    """(rule id, subject) -> finding, for the InfiniBand rules."""
    rules = [r for r in load_rules() if r.id.startswith("IB")]
    return {(f.rule_id, f.subject): f for f in evaluate(rules, readings)}


def _values(readings: dict[str, Reading]) -> dict[str, object]:
    return {k: r.value for k, r in readings.items() if r.ok}


# ------------------------------------------------------------------ real trees


def test_node_exporter_tree(realdata_trees: dict[str, Path]) -> None:
    readings = _probe(realdata_trees[NODE_EXPORTER])
    v = _values(readings)
    assert v["ib.hcas"] == ["i40iw0", "mlx4_0"]
    assert (v["ib.mlx4_0.fw_ver"], v["ib.mlx4_0.board_id"], v["ib.mlx4_0.hca_type"]) == (
        "2.31.5050",
        "SM_1141000001000",
        "MT4099",
    )
    assert (v["ib.i40iw0.fw_ver"], v["ib.i40iw0.hca_type"]) == ("0.2", "I40IW")
    for port in ("mlx4_0.1", "mlx4_0.2", "i40iw0.1"):
        assert (v[f"ib.{port}.state"], v[f"ib.{port}.phys_state"]) == ("ACTIVE", "LinkUp")
        assert v[f"ib.{port}.link_layer"] == "InfiniBand"
    assert (v["ib.mlx4_0.1.rate"], v["ib.mlx4_0.1.link_mode"]) == (40.0, "4X QDR")
    assert readings["ib.mlx4_0.1.rate"].unit == "Gb/s"
    assert (v["ib.i40iw0.1.rate"], v["ib.i40iw0.1.link_mode"]) == (10.0, "4X")
    assert v["ib.mlx4_0.1.port_xmit_discards"] == 5
    assert (v["ib.mlx4_0.1.link_downed"], v["ib.mlx4_0.2.link_error_recovery"]) == (0, 0)
    # i40iw writes "N/A (no PMA)" in every counter: no count, and says so
    no_pma = readings["ib.i40iw0.1.symbol_error"]
    assert no_pma.status is ReadingStatus.UNSUPPORTED and "N/A (no PMA)" in no_pma.reason
    # mlx4_0's fixture has no symbol_error file; port 2 no port_rcv_errors either
    for key in ("ib.mlx4_0.1.symbol_error", "ib.mlx4_0.2.port_rcv_errors"):
        assert readings[key].status is ReadingStatus.UNSUPPORTED
        assert "not found" in readings[key].reason
    assert readings["ib.mlx4_0.node_guid"].status is ReadingStatus.MISSING
    assert v["ib.i40iw0.1.fastest_rate_on_node"] == 40.0  # mlx4_0's QDR ports
    found = _findings(readings)
    slow = found[("IB003", "IB i40iw0 port 1")]
    assert slow.severity is Severity.WARNING
    assert slow.message == (
        "i40iw0 port 1 runs at 10 Gb/s, the fastest active port of its link layer on the "
        "node at 40 Gb/s"
    )
    assert ("IB003", "IB mlx4_0 port 1") not in found
    # a counter the driver lacks: the counter rules do not apply there, nothing fires
    assert found[("IB005", "IB i40iw0 port 1")].severity is Severity.NOT_APPLICABLE
    assert found[("IB005", "IB mlx4_0 port 2")].severity is Severity.NOT_APPLICABLE
    assert not [
        f
        for f in found.values()
        if f.rule_id != "IB003" and f.severity.value in ("critical", "warning", "info")
    ]


def test_procfs_tree(realdata_trees: dict[str, Path]) -> None:
    readings = _probe(realdata_trees[PROCFS])
    v = _values(readings)
    assert v["ib.hcas"] == ["hfi1_0", "mlx4_0", "mlx5_0"]
    assert v["ib.mlx5_0.node_guid"] == "0a7f:bc12:45ef:d23b"
    assert (v["ib.mlx5_0.fw_ver"], v["ib.mlx5_0.hca_type"]) == ("14.28.2006", "MT4118")
    assert (v["ib.hfi1_0.1.rate"], v["ib.hfi1_0.1.link_mode"]) == (100.0, "4X EDR")
    assert (v["ib.mlx5_0.1.rate"], v["ib.mlx5_0.1.link_mode"]) == (25.0, "1X EDR")
    assert readings["ib.hfi1_0.hca_type"].status is ReadingStatus.MISSING  # hfi1 has none
    assert v["ib.mlx4_0.1.symbol_error"] == 0 and v["ib.hfi1_0.1.link_downed"] == 0
    # this capture's mlx5_0 writes "4: ACTIVE" as its physical state: kept as written
    assert v["ib.mlx5_0.1.phys_state"] == "ACTIVE"
    assert {v[f"ib.{p}.fastest_rate_on_node"] for p in ("hfi1_0.1", "mlx4_0.2", "mlx5_0.1")} == {
        100.0
    }
    found = _findings(readings)
    fired = sorted(
        (rule, subject)
        for (rule, subject), f in found.items()
        if f.severity in (Severity.WARNING, Severity.INFO)
    )
    assert fired == [
        ("IB001", "IB mlx5_0 port 1"),  # physically "ACTIVE", not LinkUp
        ("IB003", "IB mlx4_0 port 1"),  # 40 Gb/s QDR beside hfi1_0's 100 Gb/s EDR
        ("IB003", "IB mlx4_0 port 2"),
        ("IB003", "IB mlx5_0 port 1"),  # one lane: 25 of 100
    ]
    assert found[("IB002", "IB mlx5_0 port 1")].severity is Severity.NOT_APPLICABLE


# ------------------------------------------------------------------ hand-made trees


def test_no_infiniband_directory_gives_no_readings(tmp_path: Path) -> None:
    (tmp_path / "sys/class").mkdir(parents=True)
    assert _probe(tmp_path) == {}


def test_readings_that_cannot_be_taken_say_why(tmp_path: Path) -> None:
    write_hca(tmp_path, "mlx5_0", {1: ib_port_files(rate="garbage", state="ACTIVE")})
    write_hca(tmp_path, "mlx5_1", {1: ib_port_files()})
    shutil.rmtree(tmp_path / "sys/class/infiniband/mlx5_1/ports/1/counters")
    write_hca(tmp_path, "mlx5_2", {1: {**ib_port_files(), "counters/symbol_error": "lots"}})
    counters = tmp_path / "sys/class/infiniband/mlx5_2/ports/1/counters"
    (counters / "link_downed").unlink()
    os.mkfifo(counters / "link_downed")  # not a file to read: never blocks
    write_hca(tmp_path, "mlx5_3", {1: {**ib_port_files(), "rate": None}})
    write_hca(tmp_path, "bad.name", {1: ib_port_files()})  # a dot would split the key
    (tmp_path / "sys/class/infiniband/mlx5_3/ports/notaport").mkdir()
    r = _probe(tmp_path)
    assert r["ib.hcas"].value == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert not any(k.startswith("ib.bad") or ".notaport." in k for k in r)
    for key, status, words in (
        ("ib.mlx5_0.1.rate", ReadingStatus.ERROR, "no 'N Gb/sec (...)' rate"),
        ("ib.mlx5_0.1.link_mode", ReadingStatus.ERROR, "cannot parse"),
        ("ib.mlx5_0.1.state", ReadingStatus.ERROR, "is not 'N: NAME'"),
        ("ib.mlx5_1.1.symbol_error", ReadingStatus.UNSUPPORTED, "no counters for this port"),
        ("ib.mlx5_2.1.symbol_error", ReadingStatus.ERROR, "cannot parse"),
        ("ib.mlx5_2.1.link_downed", ReadingStatus.ERROR, "not a regular file"),
        ("ib.mlx5_3.1.rate", ReadingStatus.MISSING, "rate not found"),
        ("ib.mlx5_0.pci_device", ReadingStatus.MISSING, "device not found"),
    ):
        assert r[key].status is status and words in r[key].reason, (key, r[key])
        assert r[key].value is None and r[key].source
    assert r["ib.mlx5_2.1.port_rcv_errors"].value == 0  # the port's other counters are read
    # mlx5_0 (state unreadable) and mlx5_3 (no rate) do not count: mlx5_1's 400 does
    assert r["ib.mlx5_3.1.fastest_rate_on_node"].value == 400.0
    # the rules say which reading they could not check, and why
    found = _findings(r)
    assert (
        "cannot check: ib.mlx5_3.1.rate is missing" in found[("IB003", "IB mlx5_3 port 1")].message
    )
    assert found[("IB004", "IB mlx5_2 port 1")].severity is Severity.UNKNOWN


def test_fastest_rate_is_per_link_layer_among_active_ports(tmp_path: Path) -> None:
    ports = {
        "mlx5_0": ib_port_files("400 Gb/sec (4X NDR)"),
        "mlx5_1": ib_port_files("200 Gb/sec (2X NDR)"),  # two lanes of four
        "mlx5_2": ib_port_files("10 Gb/sec (4X SDR)", "1: DOWN", "2: Polling"),
        "mlx5_3": ib_port_files("100 Gb/sec (4X EDR)", link_layer="Ethernet"),  # RoCE
        "mlx5_4": ib_port_files("200 Gb/sec (4X HDR)", link_layer="Ethernet"),
        "mlx5_5": ib_port_files("10 Gb/sec (4X SDR)", "2: INIT", "5: LinkUp"),
    }
    for hca, files in ports.items():
        write_hca(tmp_path, hca, {1: files})
    r = _probe(tmp_path)
    fastest = {hca: r[f"ib.{hca}.1.fastest_rate_on_node"].value for hca in ports}
    assert fastest == {
        "mlx5_0": 400.0,
        "mlx5_1": 400.0,
        "mlx5_2": 400.0,  # a down port's rate does not count
        "mlx5_3": 200.0,  # RoCE ports against RoCE ports
        "mlx5_4": 200.0,
        "mlx5_5": 400.0,
    }
    found = _findings(r)
    fired = sorted(
        (rule, subject) for (rule, subject), f in found.items() if f.severity is Severity.WARNING
    )
    assert fired == [
        ("IB001", "IB mlx5_2 port 1"),  # Polling: no cable, no far end
        ("IB002", "IB mlx5_5 port 1"),  # link up, no subnet manager: INIT
        ("IB003", "IB mlx5_1 port 1"),
        ("IB003", "IB mlx5_3 port 1"),
    ]
    # a down port is reported once: not also as slow
    assert found[("IB003", "IB mlx5_2 port 1")].severity is Severity.NOT_APPLICABLE
    assert found[("IB002", "IB mlx5_2 port 1")].severity is Severity.NOT_APPLICABLE
    message = found[("IB002", "IB mlx5_5 port 1")].message
    assert message == "mlx5_5 port 1 has a link but is INIT, not ACTIVE"


def test_no_active_port_of_a_link_layer(tmp_path: Path) -> None:
    write_hca(tmp_path, "mlx5_0", {1: ib_port_files(state="1: DOWN", phys_state="3: Disabled")})
    reading = _probe(tmp_path)["ib.mlx5_0.1.fastest_rate_on_node"]
    assert reading.status is ReadingStatus.UNSUPPORTED
    assert reading.reason == "no active InfiniBand port on the node has a readable rate"


def test_counter_rules_on_counts_since_boot(tmp_path: Path) -> None:
    write_hca(tmp_path, "mlx5_0", {1: ib_port_files(link_downed=2, symbol_error=7)})
    write_hca(tmp_path, "mlx5_1", {1: ib_port_files()})
    found = _findings(_probe(tmp_path))
    assert found[("IB004", "IB mlx5_0 port 1")].severity is Severity.WARNING
    assert found[("IB004", "IB mlx5_0 port 1")].message == (
        "mlx5_0 port 1: link went down 2 times since boot"
    )
    assert found[("IB005", "IB mlx5_0 port 1")].severity is Severity.INFO
    assert not [k for k in found if k[1] == "IB mlx5_1 port 1"]


# ------------------------------------------------------------------ the catalog


def test_the_catalog_knows_the_port_subject() -> None:
    assert catalog.subject_title("ib_port", {"hca": "mlx5_0", "port": "1"}) == "IB mlx5_0 port 1"
    assert catalog.subject_of_key("ib.mlx5_10.2.symbol_error") == (
        "ib_port",
        {"hca": "mlx5_10", "port": "2"},
    )
    assert catalog.subject_of_key("ib.mlx5_0.fw_ver") == ("node", {})  # an HCA's own
    assert shipped.is_counter("ib.mlx5_3.1.symbol_error")
    assert shipped.is_counter("ib.mlx5_3.1.link_downed")
    assert shipped.is_configuration("ib.mlx5_3.1.rate")
    assert shipped.identifying_kind("ib.mlx5_3.node_guid") == "guid"
    assert shipped.identifying_kind("ib.mlx5_3.sys_image_guid") == "guid"
    assert shipped.group_of("ib.mlx5_0.1.state") == shipped.group_of("ib.hcas") == "InfiniBand"


# ------------------------------------------------------------------ end to end


def _export(root: Path, target: Path, *extra: str) -> None:
    result = run_cli("--root", str(root), "--nvml-replay", REPLAY, *extra, "--export", str(target))
    assert target.is_file(), result.stderr


def test_diff_of_one_node_reports_the_counter_that_rose(tmp_path: Path) -> None:
    root = add_infiniband(build_hgx_tree(tmp_path / "tree"))
    before, after = tmp_path / "before.toml", tmp_path / "after.toml"
    _export(root, before)
    counter = root / "sys/class/infiniband/mlx5_3/ports/1/counters/symbol_error"
    counter.write_text("7\n")
    _export(root, after)
    result = run_cli("diff", "--format", "json", str(before), str(after))
    report = json.loads(result.stdout)
    assert report["rising_counters"] == ["ib.mlx5_3.1.symbol_error"]
    text = run_cli("diff", "--format", "text", str(before), str(after)).stdout
    heading = "Counters that rose between the two snapshots (errors since A):"
    assert heading in text
    assert "  ib.mlx5_3.1.symbol_error: 0 -> 7" in text.split(heading)[1]
    # and the findings of the later snapshot say it (info: symbol errors alone are no fault)
    assert "INFO IB005 IB mlx5_3 port 1: mlx5_3 port 1: 7 symbol errors since boot" in text


def test_redaction_replaces_the_guids(realdata_trees: dict[str, Path], tmp_path: Path) -> None:
    real_guid = "0a7f:bc12:45ef:d23b"  # mlx5_0's node GUID in the procfs capture
    plain, redacted = tmp_path / "plain.toml", tmp_path / "redacted.toml"
    _export(realdata_trees[PROCFS], plain)
    _export(realdata_trees[PROCFS], redacted, "--redact")
    assert real_guid in plain.read_text()
    assert real_guid not in redacted.read_text()
    assert load(redacted).reading("ib.mlx5_0.node_guid").value == "guid-1"
    # the made-up HGX node: eight node GUIDs and their system image GUIDs, all replaced
    hgx = add_infiniband(build_hgx_tree(tmp_path / "tree"))
    hgx_redacted = tmp_path / "hgx.toml"
    _export(hgx, hgx_redacted, "--redact")
    text = hgx_redacted.read_text()
    assert "946d:ae03" not in text
    snapshot = load(hgx_redacted)
    guids = {snapshot.reading(f"ib.mlx5_{i}.node_guid").value for i in range(8)}
    assert len(guids) == 8 and all(g.startswith("guid-") for g in guids)
    assert snapshot.reading("ib.mlx5_0.sys_image_guid").value in guids
    assert snapshot.reading("ib.mlx5_0.1.rate").value == 400.0  # nothing else changed


def test_host_screen_shows_the_infiniband_group(tmp_path: Path) -> None:
    root = add_infiniband(build_hgx_tree(tmp_path / "tree"))
    export = tmp_path / "snap.toml"
    _export(root, export)
    tree = views.host_tree(load(export))
    group = tree["InfiniBand"]
    assert [r.key for r in group[""]] == ["ib.hcas"]
    assert {r.key: r.value for r in group["mlx5_0"]}["ib.mlx5_0.pci_device"] == "0000:19:00.0"
    port = {r.key: r.display() for r in group["mlx5_7 1"]}
    assert port["ib.mlx5_7.1.rate"] == "400.0 Gb/s"
    assert port["ib.mlx5_7.1.link_mode"] == "4X NDR"
    assert len([sub for sub in group if sub.endswith(" 1")]) == 8


@pytest.mark.parametrize(
    ("text", "value"),
    [("4: ACTIVE\n", "ACTIVE"), ("5: LinkUp", "LinkUp"), ("2: Polling\n", "Polling")],
)
def test_parse_numbered(text: str, value: str) -> None:
    assert infiniband.parse_numbered(text) == value


def test_parse_rate() -> None:
    assert infiniband.parse_rate("2.5 Gb/sec (1X SDR)\n") == 2.5
    assert infiniband.parse_link_mode("400 Gb/sec (4X NDR)") == "4X NDR"
    for bad in ("", "fast", "40 Mb/sec (4X)", "Gb/sec"):
        with pytest.raises(ValueError):
            infiniband.parse_rate(bad)
    with pytest.raises(ValueError):
        infiniband.parse_link_mode("10 Gb/sec")
