"""What the red-team pass on c9eee35 found (issue 37), each fixed at its shared mechanism:
one-line fields (inputs.one_line), the bound on numbers (inputs.MAX_NUMBER), the fleet's
worker pool, default file names, and the smaller ones. Each test fails on c9eee35."""

from __future__ import annotations

import json
import os
import warnings
from itertools import chain
from pathlib import Path

import pytest

from gpudiag import inputs
from gpudiag.fleet.analysis import analyse
from gpudiag.fleet.load import load_fleet
from gpudiag.fleet.report import report_text
from gpudiag.model import Reading, ReadingStatus
from gpudiag.snapshot import SnapshotError, load, loads, snapshot_to_dict

from conftest import REPO
from fleetgen import base_snapshot, make_node, pcie_x8

FORGED = "n\nCRITICAL fake\r\n\tx\u2028y"
DEMO_CAPTURE = REPO / "snapshots" / "demo-hgx-h100-faulty.capture.json"
XML = Path(__file__).resolve().parents[2] / "shared/realdata/nvidia-smi-xml/telegraf__a10g.xml"


def _forged_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.lstrip("-| ").startswith("CRITICAL fake")]


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fleet of two JSON snapshots of one layout; the second's host (written past the
    model, as a hand-edited file would) holds line breaks, and it has outliers."""
    directory = tmp_path_factory.mktemp("forged")
    base = base_snapshot()
    for number, plants in ((1, ()), (2, (pcie_x8(3),))):
        data = snapshot_to_dict(make_node(base, f"node{number}", number, plants))
        if number == 2:
            data["host"] = FORGED
        (directory / f"node{number}.json").write_text(json.dumps(data))
    return directory


def test_one_line_replaces_every_line_break_and_control() -> None:
    assert inputs.one_line(FORGED) == "n CRITICAL fake x y"
    assert inputs.one_line("H100 80GB HBM3") == "H100 80GB HBM3"
    assert inputs.one_line("a\x1b[2J\x0bb\x85c") == "a b c"


def test_a_host_with_line_breaks_forges_no_report_line(two_nodes: Path) -> None:
    """Point 1: the snapshot loader, the fleet (fast path and loader) and its text and
    markdown reports, and diff, show the host on one line."""
    forged = load(two_nodes / "node2.json")
    assert forged.host == "n CRITICAL fake x y"
    loaded = load_fleet([two_nodes], workers=1)
    assert sorted(r.host for r in loaded.runs) == ["n CRITICAL fake x y", "node1"]
    report = analyse(loaded)
    for markdown in (False, True):
        text = report_text(report, markdown=markdown)
        assert "n CRITICAL fake" in text and not _forged_lines(text), text[-600:]
    from gpudiag.diff import diff_snapshots
    from gpudiag.diff import report_text as diff_text

    first = load(two_nodes / "node1.json")
    for markdown in (False, True):
        text = diff_text(diff_snapshots(first, forged), first, forged, markdown=markdown)
        assert "n CRITICAL fake" in text and not _forged_lines(text)


def test_every_one_line_field_of_a_loaded_snapshot_is_one_line(two_nodes: Path) -> None:
    data = json.loads((two_nodes / "node1.json").read_text())
    reading = data["probes"][0]["readings"][0]
    reading.update(value=FORGED, unit=FORGED, source=FORGED)
    data["findings"][0].update(subject=FORGED, title=FORGED, message="two\nlines")
    for text in (json.dumps(data), json.dumps(data, ensure_ascii=False)):
        snapshot = loads(text)
        read = snapshot.probes[0].readings[0]
        assert read.value == read.unit == read.source == "n CRITICAL fake x y"
        assert snapshot.findings[0].subject == snapshot.findings[0].title == read.value
        assert snapshot.findings[0].message == "two\nlines"  # several lines by design


def test_a_capture_and_an_import_give_one_line_fields(tmp_path: Path) -> None:
    """Point 1: a replayed capture's host file and NVML answers, and an nvidia-smi XML's
    host name and product name, are one line in the readings and the snapshot."""
    from gpudiag import capture
    from gpudiag.importing import import_files
    from gpudiag.probe import ProbeContext
    from gpudiag.probes import host as host_probe

    data = json.loads(DEMO_CAPTURE.read_text())
    for name in ("/etc/hostname", "/proc/sys/kernel/hostname"):
        data["host"]["files"][name] = {"text": FORGED + "\n"}
    data["nvml"]["devices"][0]["nvmlDeviceGetSerial"] = FORGED
    path = tmp_path / "forged.capture.json"
    path.write_text(json.dumps(data))
    hostfs, nvml, _ = capture.load(path)
    readings = list(host_probe.collect(ProbeContext(host=hostfs, nvml=nvml)))
    assert next(r for r in readings if r.key == "host.hostname").value == "n CRITICAL fake x y"
    nvml.ensure_init()
    assert "\n" in nvml.call("nvmlDeviceGetSerial", 0)  # the answer as recorded
    assert Reading("gpu.0.serial", nvml.call("nvmlDeviceGetSerial", 0)).value == (
        "n CRITICAL fake x y"  # the reading made of it: one line
    )
    xml = XML.read_text().replace("<product_name>", f"<product_name>{FORGED}", 1)
    xml = xml.replace("<nvidia_smi_log>", f"<nvidia_smi_log><hostname>{FORGED}</hostname>", 1)
    (tmp_path / "q.xml").write_text(xml)
    imported = import_files([str(tmp_path / "q.xml")])
    assert imported.host == "n CRITICAL fake x y"
    names = [r.value for r in imported.readings_by_key.values() if r.key.endswith(".name")]
    assert names and all(isinstance(v, str) and v.isprintable() for v in names), names


# ------------------------------------------------------------------ numbers

HUGE = 10**400


def test_a_number_no_reading_holds_is_refused_naming_file_and_key(two_nodes: Path) -> None:
    """Point 2: the snapshot loader names the file and the reading."""
    data = json.loads((two_nodes / "node1.json").read_text())
    readings = [r for p in data["probes"] for r in p["readings"]]
    reading = next(r for r in readings if r["key"] == "gpu.3.temperature.gpu")
    reading["value"] = HUGE
    with pytest.raises(SnapshotError, match=r"big\.json: .*401 digits") as error:
        loads(json.dumps(data), "big.json")
    assert reading["key"] in str(error.value)
    assert not inputs.number_too_large(int(inputs.MAX_NUMBER))
    assert inputs.number_too_large(inputs.MAX_NUMBER * 2) and inputs.number_too_large(1e308)
    for value in (-HUGE, 1e308, [1, -1e300]):
        with pytest.raises(ValueError, match="larger than a reading can hold"):
            Reading("gpu.0.temperature.gpu", value)


def test_one_huge_number_skips_one_file_of_a_fleet(two_nodes: Path, tmp_path: Path) -> None:
    """Point 2: the fast path's array (and a configuration's value) past a float64 is
    that file's problem: the fleet names it and reports the rest."""
    for name in ("node1.json", "node2.json"):
        (tmp_path / name).write_bytes((two_nodes / name).read_bytes())
    data = json.loads((two_nodes / "node1.json").read_text())
    for probe in data["probes"]:
        for reading in probe["readings"]:
            if reading["key"] == "gpu.3.temperature.gpu":
                reading["value"] = HUGE
    data["host"] = "node3"
    (tmp_path / "node3.json").write_text(json.dumps(data))
    data["host"] = "node4"  # a float near a float64's largest: the fleet's sums overflowed
    (tmp_path / "node4.json").write_text(json.dumps(data).replace(str(HUGE), "1e308"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's overflow warnings too
        loaded = load_fleet([tmp_path], workers=1)
        assert sorted(r.host for r in loaded.runs) == ["n CRITICAL fake x y", "node1"]
        assert [b.split(": ")[0] for b in loaded.bad] == [
            str(tmp_path / "node3.json"),
            str(tmp_path / "node4.json"),
        ]
        assert all("larger than a reading can hold" in b for b in loaded.bad), loaded.bad
        assert "node1" in report_text(analyse(loaded))


def test_a_replayed_nvml_answer_past_a_float64_is_refused(tmp_path: Path) -> None:
    """Point 2: a capture's (or replay's) NVML answer of 10**400 is refused where read."""
    from gpudiag import capture

    data = json.loads(DEMO_CAPTURE.read_text())
    data["nvml"]["devices"][0]["nvmlDeviceGetTemperature"] = {"0": HUGE}
    path = tmp_path / "big.capture.json"
    path.write_text(json.dumps(data))
    with pytest.raises(capture.CaptureError, match=r"big\.capture\.json.*Temperature.*401 digits"):
        capture.load(path)


def test_a_reading_versus_reading_rule_never_overflows() -> None:
    """Point 2: the engine's reading-vs-reading scaling of a number past a float64 (made
    past every loader's check) is an unknown finding, never an OverflowError."""
    from gpudiag.ruleengine import evaluate
    from gpudiag.rulefile import load_rules

    rules = [r for r in load_rules() if r.id == "GPU018"]  # max_reading, factor 0.95
    ok = ReadingStatus.OK
    readings = {
        "gpu.0.temperature.gpu": Reading("gpu.0.temperature.gpu", 40),
        "gpu.0.temperature.slowdown": Reading.checked(
            "gpu.0.temperature.slowdown", HUGE, "C", "", ok, ""
        ),
    }
    for quick in (True, False):
        findings = evaluate(rules, readings, quick=quick)
        assert [f.severity.value for f in findings] == ["unknown"], findings
        assert "too large" in findings[0].message


# ------------------------------------------------------------------ the fleet's workers

_SLOW_FLEET = """
import os, sys, time
import gpudiag.fleet.load as load

def slow(paths):
    print(os.getpid(), flush=True)  # a worker, reading
    time.sleep(30)
    return os.getpid(), None

load._read_chunk_tagged = slow  # forked workers inherit it
from gpudiag.cli import main
sys.exit(main(["fleet", sys.argv[1], "--workers", "2", "--format", "text"]))
"""


def _children(pid: int) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.add(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:  # a zombie (killed, not yet reaped by whoever inherited it) is not running
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_killed_fleet_leaves_no_worker(tmp_path: Path) -> None:
    """Point 3: SIGTERM (cron, timeout, Slurm) and SIGHUP (a closed ssh session) end
    `gpudiag fleet` at once; its reading workers end with it, within 5 s."""
    import signal
    import subprocess
    import sys
    import time

    for i in range(70):  # past PARALLEL_FROM: read by workers
        (tmp_path / f"n{i:03d}.json").write_text("{}")
    started = {
        sig: subprocess.Popen(
            [sys.executable, "-c", _SLOW_FLEET, str(tmp_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for sig in (signal.SIGTERM, signal.SIGHUP)
    }
    workers = {}
    for sig, process in started.items():
        assert process.stdout is not None
        assert process.stdout.readline().strip().isdigit()  # a worker is reading
        workers[sig] = _children(process.pid)
        assert workers[sig], "no worker process found"
        process.send_signal(sig)
    left = {}
    for sig, process in started.items():
        assert process.wait(5) == -sig
        deadline = time.monotonic() + 5
        while any(map(_alive, workers[sig])) and time.monotonic() < deadline:
            time.sleep(0.02)
        left[sig.name] = [pid for pid in workers[sig] if _alive(pid)]
    for pid in chain.from_iterable(left.values()):  # the test's own clean-up
        os.kill(pid, signal.SIGKILL)
    assert not any(left.values()), f"workers outlived the fleet: {left}"


# ------------------------------------------------------------------ Slurm's answers


def _slurm_health(tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str) -> str:
    """`gpudiag health --for slurm` with a stand-in scontrol; its one line, exit 3."""
    from gpudiag import cli

    from conftest import FIXTURES

    scontrol = tmp_path / "scontrol"
    scontrol.write_text(f"#!/bin/sh\n{body}\n")
    scontrol.chmod(0o755)
    node = ["--root", str(FIXTURES / "host-basic")]
    node += ["--nvml-replay", str(FIXTURES / "replay-2gpu.toml")]
    node += ["health", "--for", "slurm", "--node", "n1", "--scontrol", str(scontrol)]
    code = cli.main(node)
    out, err = capsys.readouterr()
    assert code == 3 and out == "" and len(err.strip().splitlines()) == 1, (code, out, err[:300])
    assert "internal error" not in err
    return err


def test_a_gres_count_of_5000_digits_is_one_line(tmp_path: Path, capsys) -> None:
    """Point 4: int() past Python's 4,300 digits was a plain ValueError."""
    err = _slurm_health(tmp_path, capsys, f"echo NodeName=n1 Gres=gpu:{'9' * 5000} State=IDLE")
    assert "scontrol show node n1: Gres count 999999999999... (5000 digits) is past 4096" in err


def test_an_scontrol_answer_is_read_bounded(tmp_path: Path, capsys) -> None:
    """Point 7: at most SCONTROL_MAX_BYTES of an answer are read (a 200 MB one took
    72 s and 608 MB); the scontrol writing more is killed."""
    import time

    started = time.monotonic()
    err = _slurm_health(
        tmp_path, capsys, "echo NodeName=n1 State=IDLE; exec tr '\\0' A < /dev/zero"
    )
    assert "scontrol show node n1: an answer larger than 64 KiB; killed" in err
    assert time.monotonic() - started < 5


# ------------------------------------------------------------------ files written


def test_the_export_dialog_default_name_stays_in_the_folder() -> None:
    """Point 5: the TUI's default export name from a capture's host
    'x/../../victimdir/pwned' was '../victimdir/pwned.toml' past a folder 'gpudiag-x'."""
    from dataclasses import replace

    from gpudiag.tui import GpudiagApp

    pushed = []
    hostile = replace(base_snapshot(), host="x/../../victimdir/pwned")
    app = GpudiagApp(hostile)
    app.push_screen = lambda screen, callback=None: pushed.append(screen)  # type: ignore
    app.action_export()
    name = pushed[0].default
    assert name == "gpudiag-x_____victimdir_pwned.toml", name
    assert "/" not in name and ".." not in name and Path(name).name == name
    from gpudiag.atomic import default_file_name

    for host in ("..", "-rf", "a" * 300, "n\x00\\b", ""):
        name = default_file_name("gpudiag-", host, ".toml")
        assert Path(name).name == name and ".." not in name and len(name) <= 78, name
        assert name.startswith("gpudiag-") and name[8] not in ".-", name


def test_stale_temporaries_are_removed_by_the_next_write(tmp_path: Path) -> None:
    """Point 10: kill -9 mid-export leaves `.gpudiag-XXXXXXXX.tmp` beside the target;
    the next write to that folder removes gpudiag's own older than STALE_TEMP_S (by
    name, owner and age), nothing else, and leaves none of its own."""
    import time

    from gpudiag.atomic import STALE_TEMP_S
    from gpudiag.snapshot import save

    old = time.time() - STALE_TEMP_S - 60
    names = {
        ".gpudiag-ab_cd123.tmp": old,  # stale: removed
        ".gpudiag-zz99yy88.parquet.tmp": old,  # stale: removed
        ".gpudiag-fresh123.tmp": time.time(),  # another write in progress: kept
        ".gpudiag-notes.txt": old,  # not a name of ours: kept
        "x.gpudiag-ab_cd123.tmp": old,  # kept
    }
    for name, when in names.items():
        (tmp_path / name).write_text("partial")
        os.utime(tmp_path / name, (when, when))
    save(base_snapshot(), tmp_path / "node.toml")
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == [
        ".gpudiag-fresh123.tmp",
        ".gpudiag-notes.txt",
        "node.toml",
        "x.gpudiag-ab_cd123.tmp",
    ], left


def test_a_full_disk_under_parquet_is_one_line(
    two_nodes: Path, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Point 6: `fleet --parquet` on a full disk was 'internal error: ComputeError'.
    ENOSPC as Polars reports it (its text for EFBIG, measured under RLIMIT_FSIZE: 'parquet:
    File out of specification: underlying IO error: File too large (os error 27)'),
    after part of the file is written."""
    import polars as pl

    from gpudiag import cli

    def full(self: pl.DataFrame, file: str, **options: object) -> None:
        Path(file).write_bytes(b"PAR1 partial")
        raise pl.exceptions.ComputeError(
            "parquet: File out of specification: underlying IO error: "
            "No space left on device (os error 28)"
        )

    target = tmp_path / "fleet.parquet"
    target.write_bytes(b"the old file")
    monkeypatch.setattr(pl.DataFrame, "write_parquet", full)
    code = cli.main(["fleet", str(two_nodes), "--format", "json", "--parquet", str(target)])
    err = capsys.readouterr().err
    assert code == 3, err
    assert err == f"gpudiag: --parquet {target}: cannot write: No space left on device\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fleet.parquet"]
    assert target.read_bytes() == b"the old file"


# ------------------------------------------------------------------ compiled modules


def test_a_truncated_compiled_module_falls_back_to_its_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Point 8: rules/compiled.py and gpudiag/shipped_compiled.py cut short (a SyntaxError,
    or cut after a line) are not loaded: rules, profiles and the catalog come from their
    sources, the same as from the modules."""
    import importlib.abc
    import importlib.util
    import sys

    from gpudiag import profiles, rulefile, shipped

    expected = (rulefile.load_rules(), profiles.load_profiles(), shipped._compiled_catalog())
    assert expected[2] is not None  # the module is fresh here
    cut = {}
    for name, path in (
        ("gpudiag.rules.compiled", REPO / "rules" / "compiled.py"),
        ("gpudiag.shipped_compiled", REPO / "gpudiag" / "shipped_compiled.py"),
    ):
        text = path.read_text()
        for where, end in (("mid", len(text) // 2), ("line", text.index("\n", 2000) + 1)):
            cut[name, where] = tmp_path / f"{name}-{where}.py"
            cut[name, where].write_text(text[:end])

    class Cut(importlib.abc.MetaPathFinder):
        where = "mid"

        def find_spec(self, fullname: str, path: object, target: object = None) -> object:
            if (fullname, self.where) in cut:
                return importlib.util.spec_from_file_location(fullname, cut[fullname, self.where])
            return None

    finder = Cut()
    monkeypatch.setattr(sys, "meta_path", [finder, *sys.meta_path])
    for where in ("mid", "line"):
        finder.where = where
        for name in ("gpudiag.rules.compiled", "gpudiag.shipped_compiled"):
            monkeypatch.delitem(sys.modules, name, raising=False)
            package, _, attribute = name.rpartition(".")  # imported again, not reused
            monkeypatch.delattr(sys.modules[package], attribute, raising=False)
        profiles._shipped_profiles.cache_clear()
        assert rulefile.load_rules() == expected[0]
        assert profiles.load_profiles() == expected[1]
        catalog = shipped._compiled_catalog()
        assert catalog is None, where  # built from the producers instead
    profiles._shipped_profiles.cache_clear()


def test_a_fleet_names_every_path_it_skips(two_nodes: Path, tmp_path: Path) -> None:
    """Point 9: a FIFO, a dangling symbolic link and a link loop named *.json in a fleet
    folder vanished without a word; each is named with why (a folder so named is walked)."""
    (tmp_path / "node1.json").write_bytes((two_nodes / "node1.json").read_bytes())
    os.mkfifo(tmp_path / "fifo.json")
    (tmp_path / "gone.json").symlink_to(tmp_path / "missing.json")
    (tmp_path / "loop.json").symlink_to(tmp_path / "loop.json")
    (tmp_path / "sub.toml").mkdir()
    loaded = load_fleet([tmp_path], workers=1)
    assert [r.host for r in loaded.runs] == ["node1"]
    assert loaded.bad == [
        f"{tmp_path}/fifo.json: is a FIFO (named pipe), not a regular file",
        f"{tmp_path}/gone.json: a symbolic link to nothing",
        f"{tmp_path}/loop.json: a symbolic link loop",
    ]


# ------------------------------------------------------------------ the health check


class _FailingNode:
    """A node whose probing raises `error` (what check_node reads of a LiveNode)."""

    def __init__(self, error: Exception) -> None:
        import threading

        self.error = error
        self.cancel = threading.Event()

    def snapshot(self) -> None:
        raise self.error


def test_an_unknown_verdict_says_what_could_not_be_done() -> None:
    """Point 11: the check's UNKNOWN said 'check failed: OverflowError: int too large to
    convert to float'; it says what could not be finished, in gpudiag's words where the
    error is gpudiag's, and only the kind of an unexpected one."""
    from gpudiag.health import check_node, nagios
    from gpudiag.nvml import ReplayError

    verdict = check_node(_FailingNode(OverflowError("int too large to convert to float")), 5)
    line, code = nagios(verdict)
    assert code == 3
    assert line.splitlines()[0].split(" | ")[0] == (
        "UNKNOWN - could not finish probing and judging the node: an internal error "
        "(OverflowError; GPUDIAG_DEBUG=1 shows where)"
    )
    replay = ReplayError("r.toml: devices[0].nvmlDeviceGetTemperature.0: a number of 401 digits")
    verdict = check_node(_FailingNode(replay), 5)  # type: ignore[arg-type]
    assert verdict.error == f"could not finish probing and judging the node: {replay}"


def test_a_drained_node_resumes_when_its_rule_is_unknown_elsewhere() -> None:
    """Point 14: the check that drained the node reads fine again; the same rule is
    UNKNOWN on another GPU (GPU 1 and GPU 10 too: neither is the other by its first
    characters). The node is resumed; it stays drained only while the finding that
    drained it cannot be read. Passes at c9eee35; fails with the match on the rule alone
    (the mutation that went unnoticed) or without the ':' after the subject."""
    from gpudiag.health import Slurm, Verdict, slurm
    from gpudiag.model import Action, Finding, Severity

    class Recording(Slurm):
        def __init__(self, reason: str) -> None:
            super().__init__("n1", "/nonexistent/scontrol", {})
            object.__setattr__(self, "updates", [])
            object.__setattr__(self, "reason", reason)

        def state(self) -> tuple[str, str]:
            return "IDLE+DRAIN", self.reason

        def update(self, *fields: str) -> None:
            self.updates.append(fields)

    def unknown(subject: str) -> Finding:
        return Finding("GPU011", Severity.UNKNOWN, subject, "remap pending", "cannot check")

    ours = "gpudiag: GPU011 GPU 1: GPU 1 has a row remap pending (reset)"
    drain_on = (Action.DRAIN, Action.SERVICE, Action.RESET)
    for others in (("GPU 2",), ("GPU 10",), ("GPU 2", "GPU 10")):
        cluster = Recording(ours)
        text, _ = slurm(Verdict("n1", tuple(map(unknown, others))), cluster, drain_on)
        assert cluster.updates == [("State=RESUME",)], (others, text)
        assert text.startswith("gpudiag: n1: healthy again; resumed")
    cluster = Recording(ours.replace("GPU 1", "GPU 10"))  # drained for GPU 10, GPU 1 unread
    text, _ = slurm(Verdict("n1", (unknown("GPU 1"),)), cluster, drain_on)
    assert cluster.updates == [("State=RESUME",)], text
    cluster = Recording(ours)
    text, _ = slurm(Verdict("n1", (unknown("GPU 2"), unknown("GPU 1"))), cluster, drain_on)
    assert cluster.updates == [] and "GPU011 GPU 1: remap pending cannot be checked" in text


def test_leaving_on_a_signal_or_a_hang_up_arms_the_grace_timer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Point 12: an app on a terminal that leaves on SIGTERM, SIGHUP or a hung-up terminal
    (watch_terminal) arms end_after(SHUTDOWN_GRACE_S, 128 + signal), once: a shutdown
    blocked on a terminal that is gone still ends (TUIs were left running 40 minutes at
    70% of a core). Passes at c9eee35; fails with the timer deleted (the audit's
    mutation that went unnoticed)."""
    import functools
    import signal
    import threading

    from gpudiag import tui_base

    armed: list[tuple[float, int]] = []
    monkeypatch.setattr(tui_base, "end_after", lambda grace, code: armed.append((grace, code)))
    for route in ("SIGTERM", "SIGHUP", "hang-up"):
        app = tui_base.GpudiagAppBase()
        app._on_terminal = True  # what on_mount finds on a real terminal
        left: list[int | None] = []
        monkeypatch.setattr(
            app, "exit", lambda return_code=None, left=left, **_: left.append(return_code)
        )
        if route == "hang-up":
            leave = functools.partial(app._leave_on_signal, signal.SIGHUP)
            tui_base.watch_terminal(lambda: False, leave, threading.Event(), poll_s=0.001)
        else:
            app._leave_on_signal(getattr(signal, route))
        app._leave_on_signal(signal.SIGTERM)  # a second signal arms nothing more
        assert left == [128 + (signal.SIGTERM if route == "SIGTERM" else signal.SIGHUP)]
    grace = tui_base.SHUTDOWN_GRACE_S
    assert armed == [(grace, 143), (grace, 129), (grace, 129)]
    headless = tui_base.GpudiagAppBase()  # a test's app (no terminal): no timer
    monkeypatch.setattr(headless, "exit", lambda **_: None)
    headless._leave_on_signal(signal.SIGHUP)
    assert len(armed) == 3


# ------------------------------------------------------------------ the fleet's median


def test_a_four_node_group_has_the_median_of_its_middle_two(
    two_nodes: Path, tmp_path: Path
) -> None:
    """Point 13: four nodes' thermal zone reads 1, 2, 3 and 100 C: the group's
    median is 2.5, its MAD 1.0, and node4 is far from it. Passes at c9eee35; fails with
    the median taken one place off for an even count (1, 2, 3, 4 giving 3.5: the audit's
    mutation of fleet/analysis.py's _median, which only an unrelated crash caught)."""
    data = json.loads((two_nodes / "node1.json").read_text())
    # a measurement, compared by median and MAD (a counter such as EDAC's is judged by rate)
    key = "power.thermal.thermal_zone0.temp"
    reading = next(r for p in data["probes"] for r in p["readings"] if r["key"] == key)
    for number, errors in enumerate((1, 2, 3, 100), 1):
        data["host"] = f"node{number}"
        reading["value"] = errors
        (tmp_path / f"node{number}.json").write_text(json.dumps(data))
    report = analyse(load_fleet([tmp_path], workers=1))
    odd = [o for o in report.outliers if o.value == 100]
    assert len(odd) == 1 and odd[0].node == "node4", report.outliers
    assert (odd[0].median, odd[0].mad) == (2.5, 1.0)
    assert [o.node for o in report.outliers] == ["node4"]  # nodes 1 to 3 are near 2.5


def test_a_host_name_past_host_name_max_is_cut(two_nodes: Path, tmp_path: Path) -> None:
    """Found by the fuzzer: a host 'node-1' with 300 more digits ended the fleet report
    (ClusterShell's node-set folding cannot read the range). A host name is at most
    Linux's HOST_NAME_MAX (64) characters at every loader; the fast path leaves a longer
    one to the loader, which cuts it."""
    (tmp_path / "node1.json").write_bytes((two_nodes / "node1.json").read_bytes())
    data = json.loads((two_nodes / "node1.json").read_text())
    data["host"] = "node-1" + "0" * 300
    (tmp_path / "node2.json").write_text(json.dumps(data))
    loaded = load_fleet([tmp_path], workers=1)
    assert sorted(r.host for r in loaded.runs) == ["node-1" + "0" * 58, "node1"]
    assert "node-1000" in report_text(analyse(loaded))
    assert load(tmp_path / "node2.json").host == "node-1" + "0" * 58


def test_a_parquet_fleet_gives_one_line_fields(two_nodes: Path, tmp_path: Path) -> None:
    """Point 1: the Parquet fleet's entry (hand-edited) with line breaks in a snapshot's
    path, a reading's unit and a finding's subject: read back one line each."""
    import base64
    import zlib

    import polars as pl

    from gpudiag.fleet.parquet import METADATA_KEY, read_parquet_fleet, write_parquet

    loaded = load_fleet([two_nodes / "node1.json"], workers=1)
    written = tmp_path / "fleet.parquet"
    write_parquet(analyse(loaded), str(written), loaded)
    entry = pl.read_parquet_metadata(written)[METADATA_KEY]
    document = json.loads(zlib.decompress(base64.b64decode(entry)))
    document["runs"][0]["path"] = FORGED
    document["layouts"][0]["units"][0] = FORGED
    document["runs"][0]["findings"][0][2] = FORGED
    hostile = base64.b64encode(zlib.compress(json.dumps(document).encode())).decode()
    target = tmp_path / "hostile.parquet"
    pl.read_parquet(written).write_parquet(target, metadata={METADATA_KEY: hostile})
    fleet = read_parquet_fleet(target)
    forged = [fleet.runs[0].path, fleet.layouts[0].units[0], fleet.runs[0].findings[0][2]]
    assert forged == ["n CRITICAL fake x y"] * 3
    assert not _forged_lines(report_text(analyse(fleet)))
