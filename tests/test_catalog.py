"""The declared catalog of readings (gpudiag/catalog.py) and what reads it: subjects and
their keys, declarations and their lookups, rules lint refusing undeclared keys, redaction
driven by identifying declarations, and counters that rose in the diff and the fleet."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gpudiag import catalog, shipped
from gpudiag.catalog import Catalog, CatalogError, Change, SubjectIndex
from gpudiag.diff import diff_snapshots, report_json, report_text
from gpudiag.fleet.analysis import analyse
from gpudiag.fleet.load import load_fleet
from gpudiag.fleet.report import report_text as fleet_text
from gpudiag.model import Reading, ReadingStatus
from gpudiag.redact import Redactor
from gpudiag.rulefile import DATA_FILES, lint_rule_file, load_rules
from gpudiag.session import LiveNode, with_findings
from gpudiag.snapshot import save
from gpudiag.views import host_tree

from conftest import REPO, realdata_dir, run_cli
from fleetgen import base_snapshot, make_node, with_values


def test_subjects_name_their_instances() -> None:
    assert catalog.subject_title("nvlink", {"gpu": "3", "link": "5"}) == "GPU 3 NVLink 5"
    assert catalog.subject_title("gpu_pair", {"gpu": "0", "peer": "1"}) == "GPU 0 - GPU 1"
    assert catalog.scopes()["pcie_device"] == ("device",)
    assert catalog.SUBJECTS["numa_node"].words == "every NUMA node"


def test_a_key_is_taken_apart_by_the_most_specific_subject() -> None:
    assert catalog.subject_of_key("gpu.3.nvlink.5.state") == ("nvlink", {"gpu": "3", "link": "5"})
    assert catalog.subject_of_key("gpu.3.power.limit") == ("gpu", {"gpu": "3"})
    assert catalog.subject_of_key("gpu.count") == ("node", {})
    assert catalog.template_of("pcie.0000:19:00.0.aer.fatal") == (
        "pcie_device",
        "pcie.{device}.aer.fatal",
    )
    assert catalog.template_of("topo.gpu.2.7") == ("gpu_pair", "topo.gpu.{gpu}.{peer}")


def test_fill_escapes_and_leaves_unknown_placeholders() -> None:
    assert catalog.fill("gpu.{gpu}.nvlink.{link}.state", {"gpu": "1", "link": "2"}) == (
        "gpu.1.nvlink.2.state"
    )
    assert catalog.fill("x.{other}.{gpu}", {"gpu": "0"}) == "x.{other}.0"
    # a value is text, never a format field or attribute lookup
    assert catalog.fill("gpu.{gpu}.x", {"gpu": "{0.__class__}"}) == "gpu.{0.__class__}.x"


def test_a_declaration_fills_its_own_key_and_refuses_any_other() -> None:
    speed = catalog.config("gpu.{gpu}.nvlink.{link}.speed", "GB/s")
    assert speed.fields == ("gpu", "link")
    assert speed.key(gpu=3, link=5) == "gpu.3.nvlink.5.speed"
    assert speed.key(link="5", gpu="3") == "gpu.3.nvlink.5.speed"
    assert catalog.config("gpu.count").key() == "gpu.count"
    # a value is text, never a format field or attribute lookup
    assert speed.key(gpu="{0.__class__}", link=0) == "gpu.{0.__class__}.nvlink.0.speed"
    with pytest.raises(ValueError, match="'gpu', 'link'"):
        speed.key(gpu=3)  # a field missing
    with pytest.raises(ValueError, match="given"):
        speed.key(gpu=3, link=5, port=1)  # a field the template does not have
    with pytest.raises(ValueError, match="given"):
        catalog.config("gpu.count").key(gpu=0)


def test_a_declaration_makes_its_readings_in_its_unit() -> None:
    speed = catalog.config("gpu.{gpu}.nvlink.{link}.speed", "GB/s")
    assert speed.reading(25.0, "nvml:f", gpu=0, link=1) == Reading(
        "gpu.0.nvlink.1.speed", 25.0, "GB/s", "nvml:f"
    )
    assert speed.failed(ReadingStatus.UNSUPPORTED, "no", "nvml:f", gpu=0, link=1) == (
        Reading.failed("gpu.0.nvlink.1.speed", ReadingStatus.UNSUPPORTED, "no", "nvml:f", "GB/s")
    )
    with pytest.raises(ValueError, match="unit 'MB/s', declared 'GB/s'"):
        speed.reading(1.0, unit="MB/s", gpu=0, link=1)
    with pytest.raises(ValueError, match="needed"):
        speed.reading(1.0, gpu=0)
    # a declaration whose readings each say their unit ('*') takes the reading's
    figure = catalog.volatile("gpu.{gpu}.kernel.{metric}", "*")
    assert figure.reading(1.0, unit="GB/s", gpu=0, metric="stream.triad.fp64").unit == "GB/s"


def test_a_producer_fills_the_keys_another_declares_only_from_its_list() -> None:
    makes = catalog.also("gpu.{gpu}.power.limit", "topo.gpu.{gpu}.{peer}")
    assert makes.key("topo.gpu.{gpu}.{peer}", gpu=0, peer=1) == "topo.gpu.0.1"
    with pytest.raises(KeyError, match="not among"):
        makes.key("gpu.{gpu}.power.limt", gpu=0)  # a typo is refused, not written
    with pytest.raises(ValueError, match="needed"):
        makes.key("topo.gpu.{gpu}.{peer}", gpu=0)
    # the importers emit through theirs
    from gpudiag.importing.common import key_of

    assert key_of("gpu.{gpu}.brand", gpu=2) == "gpu.2.brand"
    assert key_of("gpu.{gpu}.nvlink.{link}.state", gpu=2, link=3) == "gpu.2.nvlink.3.state"
    with pytest.raises(KeyError):
        key_of("gpu.{gpu}.nvlink.{link}.version", gpu=0, link=0)  # not imported


@pytest.mark.parametrize("demo", ["healthy", "faulty"])
def test_every_reading_of_a_replayed_demo_is_declared_by_its_producer(demo: str) -> None:
    """The shipped demo captures probed as `gpudiag --replay` probes them: every reading
    of every result (the derived one's by a derivation) is one its producer declares, in
    the declared unit where it was read; the producers emit through their declarations,
    and this is where one that writes past them would show."""
    from gpudiag.demo import demo_node

    snapshot = demo_node(demo).snapshot()
    wrong, seen = [], 0
    for result in snapshot.probes:
        producers = catalog.DERIVED_PRODUCERS if result.name == catalog.DERIVED else {result.name}
        for r in result.readings:
            seen += 1
            found = shipped.find(r.key)
            if found is None or not producers & found.producers:
                wrong.append(f"{r.key}: not declared by {result.name}")
            elif r.ok and found.unit != "*" and r.unit != found.unit:
                wrong.append(f"{r.key}: unit {r.unit!r}, declared {found.unit!r}")
    assert wrong == []
    assert seen > 1000 and {p.name for p in snapshot.probes} >= {"gpu", "pcie", catalog.DERIVED}


def test_declarations_are_found_by_key() -> None:
    found = shipped.find("gpu.3.nvlink.5.errors.replay")
    assert found is not None and found.change is Change.COUNTER
    assert found.producers == frozenset({"gpu", "import"})  # nvlink -e is imported too
    assert shipped.find("gpu.0.power.limit").unit == "W"  # type: ignore[union-attr]
    assert shipped.find("gpu.0.kernel.stream.triad.fp64.ci_low").template == (  # type: ignore[union-attr]
        "gpu.{gpu}.kernel.{metric}.ci_low"
    )
    assert shipped.find("topo.gpu.0.nic.mlx5_0").producers == {"import", "topology"}  # type: ignore[union-attr]
    assert shipped.find("gpu.0.no_such_reading") is None
    assert shipped.find("nothing") is None
    assert shipped.is_configuration("cpu.freq.governor")
    assert shipped.is_volatile("gpu.0.temperature.gpu")
    assert shipped.is_volatile("never.declared")  # never grouped on or baselined
    assert shipped.identifying_kind("gpu.2.serial") == "serial"
    assert shipped.group_of("mem.total") == "Memory"


def test_two_producers_must_declare_a_template_alike() -> None:
    with pytest.raises(CatalogError, match="declared differently"):
        Catalog.build([("a", [catalog.config("x.y", "W")]), ("b", [catalog.config("x.y", "mW")])])
    with pytest.raises(CatalogError, match="nobody declares it"):
        Catalog.build([("a", [catalog.also("x.z")])])
    both = Catalog.build([("a", [catalog.config("x.y")]), ("b", [catalog.also("x.y")])])
    assert both.producers("x.y") == {"a", "b"}


def test_the_lost_gpu_check_is_one() -> None:
    readings = {
        "gpu.0.health": Reading("gpu.0.health", "ok"),
        "gpu.1.health": Reading.failed("gpu.1.health", ReadingStatus.ERROR, "GPU is lost"),
        "gpu.1.name": Reading("gpu.1.name", "H100"),
    }
    assert catalog.lost_gpus(readings) == [1]
    assert not catalog.is_lost(readings, 0) and catalog.is_lost(readings, "1")


def test_subject_index_finds_every_instance() -> None:
    keys = [
        "gpu.0.name",
        "gpu.10.name",
        "gpu.2.nvlink.3.state",
        "topo.gpu.0.1",
        "topo.gpu.0.nic.mlx5_0",
        "pcie.0000:19:00.0.kind",
        "numa.1.cpus",
        "numa.nodes",
    ]
    index = SubjectIndex.of(keys).by_scope
    assert index["gpu"] == [("0",), ("2",), ("10",)]
    assert index["nvlink"] == [("2", "3")]
    assert index["gpu_pair"] == [("0", "1")]
    assert index["pcie_device"] == [("0000:19:00.0",)]
    assert index["numa_node"] == [("1",)]


# keys at the edges of the subjects' patterns: a GPU without a dot after its index, an
# index too long or not a number, a link without one, pairs, and a key of two lines
EDGE_KEYS = [
    "gpu.0.name", "gpu.3", "gpu.3.", "gpu.03.x", "gpu.1234567.x", "gpu.x.y", "gpu..1",
    "gpu.4.nvlink.2", "gpu.4.nvlink.2.state", "gpu.4.nvlink.x.state", "gpu.5.nvlink",
    "topo.gpu.1.2.x", "topo.gpu.1.2", "topo.gpu.1", "topo.gpux.1.2", "numa.7", "numa.7.cpus",
    "pcie.0000:19:00.0.kind", "pcie.0000:19:00.0", "nvme.1.model", "xgpu.2.a", "gpu.6.ok",
]  # fmt: skip


@pytest.mark.parametrize("keys", [EDGE_KEYS, [*EDGE_KEYS, "gpu.8.two\ngpu.9.lines"], []])
def test_the_index_and_the_gpus_found_from_lines_are_those_found_key_by_key(
    keys: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """SubjectIndex.of and gpu_indices search the keys' lines for their patterns' literal
    starts (issue 44): the same instances as each `^` pattern tried key by key (a key of
    two lines is searched as before)."""
    index, gpus = SubjectIndex.of(keys).by_scope, catalog.gpu_indices(keys)
    assert gpus == sorted({int(m[1]) for k in keys if (m := catalog.GPU_KEY.match(k))})
    assert catalog.gpu_indices(iter(keys)) == gpus
    monkeypatch.setattr(catalog, "_at_line_starts", lambda pattern: pattern)  # `^` as was
    assert SubjectIndex.of(keys).by_scope == index
    assert not keys or (("4", "2") in index["nvlink"] and ("1", "2") in index["gpu_pair"])


def test_which_source_can_hold_a_key() -> None:
    assert shipped.can_hold(["gpu"], "gpu.0.ecc.current")
    assert not shipped.can_hold(["cpu"], "gpu.0.ecc.current")
    assert not shipped.can_hold(["import-xml"], "cpu.freq.governor")  # holds what it wrote
    assert shipped.can_hold(["cpu"], "gpu.0.kernel.verified")  # derived where probes ran
    assert shipped.can_hold(["someone-else"], "cpu.model")  # unknown: never a pass


def test_rules_lint_refuses_a_rule_reading_an_undeclared_key(tmp_path: Path) -> None:
    rule = tmp_path / "site.toml"
    rule.write_text(
        '[[rule]]\nid = "SITE001"\nseverity = "warning"\ntitle = "t"\napplies_to = "gpu"\n'
        'reading = "gpu.{gpu}.ecc.volatile.uncorrectable"\nexpect = { max = 0 }\n'
        'why = "w"\nfix = "f"\n'
    )
    # every error in one run, in the file's order, on standard error: this one, a second
    # rule's bad severity and a duplicate id after it, and a file that is not there
    rule.write_text(
        rule.read_text()
        + rule.read_text().replace('"warning"', '"urgent"')
        + rule.read_text().replace("uncorrectable", "uncorrected")
    )
    run = run_cli("rules", "lint", str(rule), str(tmp_path / "absent.toml"))
    assert run.returncode == 3 and run.stdout == ""
    errors = run.stderr.splitlines()
    assert [e.split(": ", 2)[1].rsplit(":", 1)[1] for e in errors[:3]] == ["1", "10", "19"]
    assert "reads gpu.{gpu}.ecc.volatile.uncorrectable, which no probe" in errors[0]
    assert "severity must be critical, warning or info" in errors[1]
    assert "duplicate id, first defined at" in errors[2]
    assert "absent.toml" in errors[3] and "no such file" in errors[3] and len(errors) == 4
    rule.write_text(rule.read_text().split("[[rule]]")[1].replace("uncorrectable", "uncorrected"))
    rule.write_text("[[rule]]" + rule.read_text())
    run = run_cli("rules", "lint", str(rule))
    assert run.returncode == 0, run.stderr
    assert "1 rules" in run.stdout


def test_every_shipped_rule_file_passes_lint() -> None:
    """The shipped rules read only declared keys (lint checks each rule's reading, the
    reading it compares with and its applies_if reading)."""
    files = [p for p in sorted((REPO / "rules").glob("*.toml")) if p.name not in DATA_FILES]
    counted = sum(lint_rule_file(path)[0] for path in files)
    assert counted == len(load_rules())


def test_explain_says_who_makes_the_reading() -> None:
    run = run_cli("rules", "explain", "PCIE001")
    assert "The reading: made by gpu, import, in lanes, configuration." in run.stdout


def test_redaction_follows_the_identifying_declarations() -> None:
    snapshot = with_values(base_snapshot(), {"gpu.0.serial": "1650923012345"})
    redacted = Redactor().snapshot(snapshot)
    serial = redacted.readings_by_key["gpu.0.serial"].value
    assert serial.startswith("serial-") and "1650923012345" not in str(redacted)


def _with_counter(snapshot, created: str, replays: int):
    return make_node(
        snapshot,
        "node001",
        1,
        (lambda v, f: v.update({"gpu.2.pcie.replay_counter": replays}),),
        created=created,
    )


def test_diff_calls_out_counters_that_rose_on_one_node() -> None:
    before = _with_counter(base_snapshot(), "2026-11-01T00:00:00Z", 0)
    after = _with_counter(base_snapshot(), "2026-11-02T00:00:00Z", 17)
    diff = diff_snapshots(before, after)
    assert [c.key for c in diff.rising_counters()] == ["gpu.2.pcie.replay_counter"]
    text = report_text(diff, before, after)
    assert "Counters that rose between the two snapshots" in text
    assert "gpu.2.pcie.replay_counter: 0 -> 17" in text
    assert report_json(diff)["rising_counters"] == ["gpu.2.pcie.replay_counter"]
    # two different nodes: a higher count is a difference, not errors "since A"
    other = make_node(base_snapshot(), "node002", 2, created="2026-11-02T00:00:00Z")
    other = with_values(other, {"gpu.2.pcie.replay_counter": 17})
    assert diff_snapshots(before, other).rising_counters() == []
    # a fall (a reboot reset it) is not rising
    assert diff_snapshots(after, before).rising_counters() == []


def test_fleet_history_reports_counters_that_rose(tmp_path: Path) -> None:
    save(_with_counter(base_snapshot(), "2026-11-01T00:00:00Z", 0), tmp_path / "a.json")
    save(_with_counter(base_snapshot(), "2026-11-02T00:00:00Z", 17), tmp_path / "b.json")
    report = analyse(load_fleet([tmp_path]))
    assert [(c.node, c.reading, c.before, c.after) for c in report.rising] == [
        ("node001", "gpu.2.pcie.replay_counter", 0.0, 17.0)
    ]
    assert "node001 gpu.2.pcie.replay_counter: rose 0 -> 17" in fleet_text(report)
    assert report.odd


def test_the_fleet_names_devices_by_the_catalogs_subjects() -> None:
    from gpudiag.fleet.analysis import template

    assert template("gpu.3.power.limit") == ("gpu.{gpu}.power.limit", "GPU 3")
    assert template("gpu.3.nvlink.5.state") == ("gpu.{gpu}.nvlink.5.state", "GPU 3")
    assert template("topo.gpu.0.1.copy_gbs") == ("topo.gpu.{gpu}.{peer}.copy_gbs", "GPU 0 - GPU 1")
    assert template("ib.mlx5_0.1.rate") == ("ib.{hca}.{port}.rate", "IB mlx5_0 port 1")
    assert template("nvme.0.link.current_width")[1] == "nvme0"
    assert template("cpu.model") == ("cpu.model", "")


def test_the_fleet_reads_the_stored_profile(tmp_path: Path) -> None:
    """The model a node is compared within is the profile its judgment stored (here one
    named with --profile, which the GPUs' device id would not select)."""
    node = with_findings(make_node(base_snapshot(), "node001", 1), load_rules(), "h200-sxm")
    assert node.readings_by_key["node.profile"].value == "h200-sxm"
    save(node, tmp_path / "a.json")
    report = analyse(load_fleet([tmp_path]))
    assert [g.model for g in report.groups] == ["h200-sxm x8"]


def test_the_host_tree_shows_undeclared_readings_apart() -> None:
    snapshot = base_snapshot()
    probe = replace(
        snapshot.probes[0],
        readings=(*snapshot.probes[0].readings, Reading("site.rack_position", "U12")),
    )
    tree = host_tree(replace(snapshot, probes=(probe, *snapshot.probes[1:])))
    assert list(tree)[-1] == "Undeclared"
    assert [r.key for rs in tree["Undeclared"].values() for r in rs] == ["site.rack_position"]
    assert "Undeclared" not in host_tree(snapshot)


def test_lint_checks_every_shipped_file_data_files_included() -> None:
    run = run_cli("rules", "lint", *sorted(str(p) for p in (REPO / "rules").glob("*.toml")))
    assert run.returncode == 0, run.stdout
    from gpudiag.profiles import load_profiles

    count = len(load_profiles())  # every profile the file holds is counted and linted
    assert f"profiles.toml: ok (a data file: {count} profiles)" in run.stdout
    assert "explanations.toml: ok (a data file:" in run.stdout


def test_keys_are_taken_apart_by_their_declared_template() -> None:
    assert shipped.parts("topo.gpu.2.nic.0000:19:00.0") == (
        "topo.gpu.{gpu}.nic.{nic}",
        {"gpu": "2", "nic": "0000:19:00.0"},
    )
    assert shipped.gpus_of("topo.gpu.2.7.copy_gbs") == ("2", "7")
    assert shipped.gpus_of("gpu.3.nvlink.5.state") == ("3",)
    assert shipped.gpus_of("cpu.model") == ()
    moved = {"2": "5", "7": "0", "3": "1"}
    assert shipped.renumber_gpus("topo.gpu.2.nic.mlx5_0", moved) == "topo.gpu.5.nic.mlx5_0"
    assert shipped.renumber_gpus("topo.gpu.2.7.p2p", moved) == "topo.gpu.5.0.p2p"
    assert shipped.renumber_gpus("gpu.3.nvlink.5.state", moved) == "gpu.1.nvlink.5.state"
    assert shipped.renumber_gpus("gpu.3.kernel.stream.triad.fp64.ci_low", moved) == (
        "gpu.1.kernel.stream.triad.fp64.ci_low"
    )
    assert shipped.renumber_gpus("gpu.3.not_declared.x", moved) == "gpu.1.not_declared.x"
    assert shipped.renumber_gpus("numa.3.cpus", moved) == "numa.3.cpus"  # not a GPU index


def _subject_by_every_pattern(key: str) -> tuple[str, dict[str, str]]:
    """catalog.subject_of_key as it was: every subject's pattern tried on the key."""
    best: tuple[str, dict[str, str]] = ("node", {})
    for subject in catalog.SUBJECTS.values():
        if subject.stem and len(subject.placeholders) > len(best[1]):
            match = subject.instance_pattern.match(key)
            if match:
                best = (subject.name, dict(zip(subject.placeholders, match.groups(), strict=True)))
    return best


def _find_by_one_pattern_per_head(found: Catalog, key: str) -> object:
    """Catalog.find as it was: the exact template, else one alternation of every template
    under the key's head (the first alternative matching the whole key)."""
    import re

    exact = found.declared.get(catalog.template_of(key)[1])
    if exact is not None and "{metric}" not in exact.template:
        return exact
    head = key.split(".", 1)[0]
    if head not in found._by_head:
        return None
    items = found._by_head[head]
    alternatives = "|".join(f"({catalog.template_regex(d.template)})" for d in items)
    match = re.compile(rf"(?:{alternatives})\Z").match(key)
    return items[match.lastindex - 1] if match and match.lastindex else None


def _assert_subjects_as_every_pattern(keys: set[str]) -> None:
    shipped_catalog = shipped.catalog()
    kernel_keys = {
        f"gpu.{g}.kernel.{k}" for g in (0, 7) for k in ("stream.triad", "gemm.bf16.tflops", "x")
    }
    for key in sorted(keys | kernel_keys):
        assert shipped_catalog.find(key) is _find_by_one_pattern_per_head(shipped_catalog, key)
    for key in sorted(keys):
        assert catalog.subject_of_key(key) == _subject_by_every_pattern(key), key
        # template_of (each key's first `find`) cuts the stem off where its match ends:
        # the template the subject's values and the filled stem give
        scope, values = _subject_by_every_pattern(key)
        assert catalog.template_of(key) == (scope, catalog.stem_template(key, scope, values)), key


def _captured_keys(captures: list[Path]) -> set[str]:
    """Every key of the snapshots the captures give on replay (derived ones included)."""
    from gpudiag import capture
    from gpudiag.probes import default_probes

    keys: set[str] = set()
    for path in captures:
        host, nvml, _ = capture.load(path)
        keys |= set(LiveNode(host, nvml, default_probes(), load_rules()).snapshot().readings_by_key)
    return keys


def test_subject_of_key_by_the_key_head_answers_as_every_pattern() -> None:
    """subject_of_key tries only the subjects whose stem begins with the key's first
    segment: the same answer as trying every subject's pattern, for every key of the demo
    captures (probed on replay), every declared template and keys made to be awkward."""
    keys = {catalog.sample_key(t) for t in shipped.catalog().declared}
    keys |= {
        "gpu", "gpu.", "gpu.x", "gpu.3", "gpu.1234567.name", "gpu.3.nvlink", "gpu.3.nvlink.x",
        "topo.gpu.1", "topo.gpu.1.2", "topo.gpu.1.nic.0000:19:00.0", "pcie.0000:1b:00.0",
        "pcie.0000:1b:00.0.link.speed", "pcie.zz", "ib.mlx5_0.1.state", "ib.mlx5_0",
        "nvme.0.model", "numa.1", "numa.x.y", "x\ngpu.1.y", "gpu.1\n.y", "", ".", "..",
    }  # fmt: skip
    captures = sorted((REPO / "snapshots").glob("*.capture.json"))
    assert len(captures) == 2
    keys |= _captured_keys(captures)
    assert len(keys) > 2000
    _assert_subjects_as_every_pattern(keys)


def test_subject_of_key_answers_as_every_pattern_on_real_data() -> None:
    """The same for every key of the real captures (the H100 VM) and of the real
    nvidia-smi outputs imported."""
    from gpudiag.importing import import_files

    captures = sorted(realdata_dir().glob("*/*.capture.json"))
    assert captures
    keys = _captured_keys(captures)
    for text in sorted(realdata_dir().glob("nvidia-smi-q/*.txt")):
        keys |= set(import_files([str(text)]).readings_by_key)
    assert len(keys) > 200
    _assert_subjects_as_every_pattern(keys)
