"""Issue 27, point 2: control characters and terminal escapes never pass an ingestion
path. The guard is a property of the parser every loader calls (inputs.parse_data) and
of the msgspec paths' one raw-bytes check (inputs.json_may_hold_controls): the fleet's
fast JSON path (every file, not the first of a layout), the Parquet fleet entry, a
capture's host records, file names in messages; JUnit stays well-formed XML and
Prometheus labels pass promtool."""

from __future__ import annotations

import base64
import json
import subprocess
import xml.etree.ElementTree as ET
import zlib
from dataclasses import replace
from pathlib import Path

import msgspec
import polars as pl
import pytest
from test_formats import promtool

from gpudiag import inputs
from gpudiag.fleet.load import load_fleet
from gpudiag.fleet.parquet import METADATA_KEY, read_parquet_fleet
from gpudiag.snapshot import save

from conftest import REPO, run_cli
from fleetgen import base_snapshot, make_node

# OSC 52 (clipboard write), clear screen, a forged CRITICAL line, a C1 CSI, a lone DEL
HOSTILE = "\x1b]52;c;cm0gLXJmIH4=\x07n\x1b[2J\r\x1b[1ACRITICAL forged\x9b31m\x7f"
CONTROLS = ("\x1b", "\x07", "\x9b", "\x7f", "\r")
DEMO_CAPTURE = REPO / "snapshots" / "demo-hgx-h100-faulty.capture.json"


def _clean(text: str) -> bool:
    return not any(c in text for c in CONTROLS)


def _strings(value: object) -> list[str]:
    """Every string in nested data (dataclasses as their fields, structs too)."""
    out: list[str] = []
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list | tuple):
            stack.extend(v)
        elif hasattr(v, "__struct_fields__"):
            stack.extend(getattr(v, f) for f in v.__struct_fields__)
    return out


@pytest.fixture(scope="module")
def hostile_fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three JSON snapshots of one layout: the first clean (the fast path validates the
    first of a layout with the loader), the other two hostile in host, a reading's value
    and a finding's subject."""
    directory = tmp_path_factory.mktemp("hostile")
    base = base_snapshot()
    for number in (1, 2, 3):
        node = make_node(base, f"node00{number}", number)
        if number > 1:
            findings = tuple(replace(f, subject=HOSTILE) for f in node.findings)
            node = replace(node, host=f"node00{number}{HOSTILE}", findings=findings)
        save(node, directory / f"node00{number}.json")
    (directory / "bad\x1b[2J\x1b]0;title\x07.json").write_text("{not json")
    return directory


def test_json_may_hold_controls() -> None:
    encode = msgspec.json.encode
    assert inputs.json_may_hold_controls(encode({"a": HOSTILE}))
    # a line break or a tab too: one-line fields (inputs.one_line) are made so there
    breaks = ("tab\there", "new\nline", "line\u2028separator")
    for one in ("\x1b", "\x00", "\x0d", "\x7f", "\x85", "\x9b", *breaks):
        assert inputs.json_may_hold_controls(encode(one)), repr(one)
        assert inputs.json_may_hold_controls(json.dumps(one).encode()), repr(one)
    # a control after an innocent backslash (a path): every hint is looked at, not the first
    assert inputs.json_may_hold_controls(encode("C:\\dir then \x1b"))
    for fine in ("°C ü 😀 — ±", "\\u001b as text"[2:]):
        assert not inputs.json_may_hold_controls(encode(fine)), repr(fine)


def test_fleet_fast_path_guards_every_file(hostile_fleet: Path) -> None:
    loaded = load_fleet([hostile_fleet], workers=1)
    assert len(loaded.runs) == 3
    for run in loaded.runs:
        assert _clean(run.host) and _clean(run.path), repr(run.host)
        assert all(_clean(s) for f in run.findings for s in f)
    assert [r.host for r in loaded.runs][1].startswith("node002")
    assert all(_clean(b) for b in loaded.bad) and len(loaded.bad) == 1
    result = run_cli("fleet", str(hostile_fleet), "--format", "text")
    assert _clean(result.stdout) and _clean(result.stderr), result.stdout[-500:]
    assert "node002" in result.stdout and "/bad.json: not valid JSON" in result.stderr


def test_parquet_entry_is_guarded(hostile_fleet: Path, tmp_path: Path) -> None:
    clean = tmp_path / "clean"
    clean.mkdir()
    (clean / "node001.json").write_bytes((hostile_fleet / "node001.json").read_bytes())
    written = tmp_path / "fleet.parquet"
    result = run_cli("fleet", str(clean), "--format", "json", "--parquet", str(written))
    assert written.exists(), result.stderr
    entry = pl.read_parquet_metadata(written)[METADATA_KEY]
    document = json.loads(zlib.decompress(base64.b64decode(entry)))
    document["layouts"][0]["units"][0] = HOSTILE
    document["runs"][0]["findings"][0][2] = HOSTILE
    document["runs"][0]["path"] = HOSTILE
    hostile = base64.b64encode(zlib.compress(json.dumps(document).encode())).decode()
    target = tmp_path / "hostile.parquet"
    pl.read_parquet(written).write_parquet(target, metadata={METADATA_KEY: hostile})
    loaded = read_parquet_fleet(target)
    strings = _strings([loaded.layouts[0].units, loaded.runs[0].findings, loaded.runs[0].path])
    assert strings and all(_clean(s) for s in strings)
    assert any("CRITICAL forged" in s for s in strings)


@pytest.fixture(scope="module")
def hostile_capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = json.loads(DEMO_CAPTURE.read_text())
    for name in ("/etc/hostname", "/proc/sys/kernel/hostname"):
        data["host"]["files"][name] = {"text": f"gpunode01{HOSTILE}\n"}
    target = tmp_path_factory.mktemp("capture") / "hostile.capture.json"
    target.write_text(json.dumps(data))
    return target


@pytest.mark.parametrize("fmt", ["junit", "prometheus", "json"])
def test_capture_host_records_are_guarded(hostile_capture: Path, fmt: str) -> None:
    result = run_cli("--replay", str(hostile_capture), "--export", "-", "--format", fmt)
    assert result.returncode in (0, 1, 2), result.stderr
    assert _clean(result.stdout) and _clean(result.stderr)
    if fmt == "junit":
        root = ET.fromstring(result.stdout.split("\n", 1)[1])  # noqa: S314 - our output
        assert "gpunode01" in root.find("testsuite").get("hostname")  # type: ignore[union-attr]
    elif fmt == "prometheus":
        check = subprocess.run(
            [promtool(), "check", "metrics"],
            input=result.stdout,
            capture_output=True,
            text=True,
            check=False,
        )
        assert check.returncode == 0, check.stdout + check.stderr
        assert 'host="gpunode01' in result.stdout


def test_formats_escape_whatever_reaches_them() -> None:
    """The writers' own guard, for a snapshot built in memory (no loader on the way)."""
    from gpudiag.output.junit import junit
    from gpudiag.output.prometheus import prometheus
    from gpudiag.rulefile import load_rules

    snap = replace(base_snapshot(), host=f"n{HOSTILE}\ufffe\ud800\"\\")
    text = prometheus(snap)
    assert _clean(text) and "\ud800" not in text
    check = subprocess.run(
        [promtool(), "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, check.stdout + check.stderr
    xml = junit(snap, load_rules())
    ET.fromstring(xml.split("\n", 1)[1].encode("utf-8"))  # noqa: S314 - our output


def test_file_names_in_messages_are_printable(tmp_path: Path) -> None:
    name = tmp_path / "gone\x1b]52;c;eA==\x07\x1b[2J.toml"
    result = run_cli("check", str(name))
    assert result.returncode == 3
    assert _clean(result.stdout + result.stderr) and "gone" in result.stderr


def test_parse_data_makes_every_string_printable() -> None:
    data = inputs.parse_data(json.dumps({HOSTILE: [HOSTILE, {"k": HOSTILE}]}), "x")
    assert all(_clean(s) for s in _strings(data))
    data = inputs.parse_data(f'"{json.dumps(HOSTILE)[1:-1]}" = 1\n', "x", as_json=False)
    assert all(_clean(s) for s in _strings(data))


def test_parse_data_walks_the_strings_only_where_an_escape_can_make_a_control(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 44 (check's speed): an innocent escape (the quotes of a rule's fix, in every
    export) leaves the parsed data as it is, without a walk of every string; an escaped
    control, a line break or a raw DEL is still removed."""
    walked: list[object] = []
    walk = inputs.printable_data
    monkeypatch.setattr(inputs, "printable_data", lambda d: walked.append(d) or walk(d))
    text = json.dumps({"fix": 'load it: mknod "$(awk \'$2==\\"x\\"\')" C:\\dir', "n": [1.5]})
    assert inputs.parse_data(text, "x") == json.loads(text) and not walked
    for hostile in (HOSTILE, "new\nline", "tab\t", "\x7f", "C:\\dir then \x1b"):
        data = inputs.parse_data(json.dumps({"host": hostile}), "x")
        assert _clean(data["host"]) and data["host"].isprintable(), repr(hostile)
    assert len(walked) == 5


# ---------------------------------------------------------------- point 4: instance indices


def _with_long_index(directory: Path, name: str) -> Path:
    """A snapshot that holds a reading of GPU 99...9 (5,000 digits)."""
    from gpudiag.model import Reading

    node = make_node(base_snapshot(), "nodex", 7)
    probe = node.probes[0]
    huge = Reading(f"gpu.{'9' * 5000}.temperature.gpu", 40, "C", "nvml")
    probes = (replace(probe, readings=(*probe.readings, huge)), *node.probes[1:])
    path = directory / name
    save(replace(node, probes=probes), path)
    return path


def test_a_long_instance_index_is_one_bad_file(hostile_fleet: Path, tmp_path: Path) -> None:
    fleet = tmp_path / "fleet"
    fleet.mkdir()
    for name in ("node001.json", "node002.json"):
        (fleet / name).write_bytes((hostile_fleet / name).read_bytes())
    bad = _with_long_index(fleet, "node009.json")
    result = run_cli("fleet", str(fleet), "--format", "text")
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr
    assert f"skipped {bad}: " in result.stderr and "more than 6 digits" in result.stderr
    assert "2 nodes, 2 snapshots, 1 unreadable" in result.stdout
    for args in (["check", str(bad)], ["diff", str(bad), str(fleet / "node001.json")]):
        result = run_cli(*args)
        assert result.returncode == 3, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert "more than 6 digits" in result.stderr


def test_instances_are_ordered_without_parsing_long_digits() -> None:
    from gpudiag import catalog

    values = [("10",), ("2",), ("x",), ("9" * 5000,), ("²",)]
    assert catalog._ordered(values)[:2] == [("2",), ("10",)]
    assert catalog.gpu_of(f"gpu.{'9' * 7}.power") is None
    with pytest.raises(ValueError, match="more than 6 digits"):
        catalog.check_key(f"nic.{'1' * 7}")
    catalog.check_key("gpu.123456.power")
    catalog.check_key("pcie.0000:1b:00.0.width")
