"""Nothing lost, nothing leaked (issue 16): each failure class of the red-team pass, and a
table of every entry point x every bad-input class.

The table runs `gpudiag.cli.main` in this process (the same code as the command, without
a second of interpreter start-up per case); the cases that need a real process (a closed
standard output, signals) run in a subprocess here and in test_reliability_signals.py.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import stat
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import tomli_w

from gpudiag import cli, inputs
from gpudiag.hostfs import HostFS
from gpudiag.model import Reading
from gpudiag.redact import Redactor
from gpudiag.snapshot import dumps, load, snapshot_from_dict, snapshot_to_dict
from gpudiag.textparse import parse_cpulist, parse_cpumask

from conftest import FIXTURES, REPO, run_cli
from hosttree import build_hgx_tree

TREE = str(FIXTURES / "host-basic")
REPLAY = str(FIXTURES / "replay-2gpu.toml")
DEMO = str(REPO / "snapshots" / "demo-hgx-h100-healthy.toml")


def gpudiag(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run the command line in this process: (exit code, stdout, stderr)."""
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    inputs.set_limit(inputs.DEFAULT_MAX_INPUT)
    return code, out, err


@pytest.fixture(scope="module")
def good_snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("good") / "good.toml"
    assert cli.main(["--root", TREE, "--nvml-replay", REPLAY, "--export", str(target)]) in (
        0,
        1,
        2,
        3,
    )
    return target


def disk_state(*folders: Path) -> dict[str, tuple[int, int, int, str]]:
    """Every entry below the folders: mode, size, mtime and (for links) the target."""
    state = {}
    for folder in folders:
        for path in [folder, *folder.rglob("*")]:
            st = os.lstat(path)
            link = os.readlink(path) if stat.S_ISLNK(st.st_mode) else ""
            state[str(path)] = (st.st_mode, st.st_size, st.st_mtime_ns, link)
    return state


def one_line(code: int, out: str, err: str, name: str, expect: str = "") -> str:
    """Exit 3, one line naming the file (and the problem), no traceback."""
    text = err if err.strip() else out
    assert code == 3, (code, out, err)
    assert "Traceback" not in out + err and "internal error" not in out + err, err
    assert len(text.strip().splitlines()) == 1, text
    assert name in text, (name, text)
    if expect:
        assert re.search(expect, text), (expect, text)
    return text


# ------------------------------------------------------------------ the table

NESTED = "x = " + "[" * 3000 + "]" * 3000 + "\n"
BIG = "1" * 5000


def _q_deep() -> str:
    lines = ["==============NVSMI LOG==============", "", "GPU 00000000:01:00.0"]
    lines.append("    Clocks Event Reasons")
    lines += [" " * (8 + i) + f"Level {i}" for i in range(3000)]
    return "\n".join(lines) + "\n"


# A bad-input class: (name, content for a TOML-reading loader, content for an import, the
# problem the one line names). None: the class is the kind of file, not its content.
CLASSES: dict[str, tuple[bytes | None, bytes | None, str]] = {
    "missing": (None, None, "no such file"),
    "directory": (None, None, "is a directory|not a directory"),
    "fifo": (None, None, "FIFO"),
    "dev-zero": (None, None, "device"),
    "empty": (b"", b"", "empty|no rules|not an NVML|not a gpudiag"),
    "binary": (b"\x00\x01\x02\x7fELF", b"\x00\x01\x02\x7fELF", "binary|not valid|UTF-8"),
    "not-utf8": (b"host = '\xff\xfe'\n", b"GPU 0: caf\xe9\n", "UTF-8|not an nvidia-smi"),
    "oversize": (
        b"# padding\n" * 60000,
        b"# padding\n" * 60000,
        r"larger than 512 KiB \(--max-input raises",
    ),
    "truncated": (
        b"schema_version = 1\nhost = ",
        b"<?xml version='1.0'?>\n<nvidia_smi_log>",
        "not valid|the XML stops part-way .*: the end of <nvidia_smi_log> is missing",
    ),
    "nan": (b"x = nan\n", b"x = nan\n", "non-finite|not an nvidia-smi"),
    "deep": (NESTED.encode(), _q_deep().encode(), "nested too deeply"),
    "huge-int": (
        f"x = {BIG}\n".encode(),
        f"GPU {BIG}: NVIDIA H100 (UUID: x)\n  Link 0: 26 GB/s\n".encode(),
        "digits|integer",
    ),
}


def make_input(tmp: Path, cls: str, for_import: bool) -> Path:
    """The bad input of class `cls` in `tmp` (a FIFO, a link to /dev/zero, ...)."""
    path = tmp / ("input.txt" if for_import else "input.toml")
    if cls == "missing":
        return path
    if cls == "directory":
        path.mkdir()
    elif cls == "fifo":
        os.mkfifo(path)
    elif cls == "dev-zero":
        path.symlink_to("/dev/zero")
    else:
        content = CLASSES[cls][1 if for_import else 0]
        assert content is not None
        path.write_bytes(content)
    return path


def _rules_dir(tmp: Path, bad: Path) -> Path:
    folder = tmp / "rules.d"
    folder.mkdir()
    if bad.exists() or bad.is_symlink() or bad.is_dir():
        bad.rename(folder / "site.toml")
    else:  # missing: a dangling link in the folder
        (folder / "site.toml").symlink_to(tmp / "nowhere.toml")
    return folder


# An entry point: (argv from (the bad input, a good snapshot, an output path), is an import,
# name shown in the one line: the input, or for --rules the file inside the folder)
ENTRY_POINTS: dict[str, tuple[Callable[[Path, Path, Path], list[str]], bool]] = {
    "check": (lambda bad, good, out: ["check", str(bad)], False),
    "view": (lambda bad, good, out: ["view", str(bad)], False),
    "diff A": (lambda bad, good, out: ["diff", "--format", "text", str(bad), str(good)], False),
    "diff B": (lambda bad, good, out: ["diff", "--format", "json", str(good), str(bad)], False),
    "import": (lambda bad, good, out: ["import", str(bad), "-o", str(out)], True),
    "--nvml-replay": (
        lambda bad, good, out: ["--root", TREE, "--nvml-replay", str(bad), "--export", str(out)],
        False,
    ),
    "--replay": (lambda bad, good, out: ["--replay", str(bad), "--export", str(out)], False),
    "rules lint": (lambda bad, good, out: ["rules", "lint", str(bad)], False),
    "--rules DIR": (
        lambda bad, good, out: ["--rules", str(_rules_dir(bad.parent, bad)), "check", str(good)],
        False,
    ),
}


# An empty rule file is a valid one holding no rules (loading and lint agree): not bad input.
NOT_BAD = {("rules lint", "empty"), ("--rules DIR", "empty")}
CASES = [(e, c) for e in ENTRY_POINTS for c in CLASSES if (e, c) not in NOT_BAD]


@pytest.mark.parametrize(("entry", "cls"), CASES)
def test_every_entry_point_refuses_every_bad_input(
    entry: str, cls: str, tmp_path: Path, good_snapshot: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv_of, for_import = ENTRY_POINTS[entry]
    work = tmp_path / "work"
    work.mkdir()
    bad = make_input(work, cls, for_import)
    out = tmp_path / "out.toml"
    argv = argv_of(bad, good_snapshot, out)
    if cls == "oversize":
        argv = ["--max-input", "512K", *argv]  # the good snapshot is smaller
    name = "site.toml" if entry == "--rules DIR" else str(bad)
    if entry == "--rules DIR" and cls == "missing":
        name = "nowhere.toml|site.toml"
    before = disk_state(work, good_snapshot.parent)
    started = time.monotonic()
    code, stdout, stderr = gpudiag(capsys, *argv)
    assert time.monotonic() - started < 20
    expect = CLASSES[cls][2]
    if entry == "--rules DIR" and cls == "missing":
        one_line(code, stdout, stderr, "site.toml", "no such file")
    else:
        one_line(code, stdout, stderr, name.split("|")[0], expect)
    assert disk_state(work, good_snapshot.parent) == before
    assert not out.exists()


# ------------------------------------------------------------------ 1: export targets


def _device_node(tmp: Path) -> Path:
    """A character device to export onto: a private /dev/null node (as root), else the
    system's /dev/null (which a non-root process could not replace anyway)."""
    if os.geteuid() == 0:
        node = tmp / "null"
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        return node
    return Path("/dev/null")


@pytest.mark.parametrize("kind", ["device", "fifo", "symlink", "directory", "dangling"])
@pytest.mark.parametrize("option", ["--export", "import -o"])
def test_export_target_must_be_absent_or_a_regular_file(
    kind: str, option: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kept = tmp_path / "kept.toml"
    kept.write_text("keep me")
    target = {
        "device": lambda: _device_node(tmp_path),
        "fifo": lambda: (os.mkfifo(tmp_path / "fifo"), tmp_path / "fifo")[1],
        "symlink": lambda: ((tmp_path / "link").symlink_to(kept), tmp_path / "link")[1],
        "dangling": lambda: ((tmp_path / "gone").symlink_to(tmp_path / "x"), tmp_path / "gone")[1],
        "directory": lambda: (tmp_path / "dir").mkdir() or tmp_path / "dir",
    }[kind]()
    before = os.lstat(target)
    if option == "--export":
        argv = ["--root", TREE, "--nvml-replay", REPLAY, "--export", str(target)]
    else:
        argv = [
            "import",
            str(REPO / "tests/fixtures/../fixtures/replay-2gpu.toml"),
            "-o",
            str(target),
        ]
        smi = tmp_path / "smi.txt"
        smi.write_text("GPU 0: NVIDIA H100 (UUID: GPU-1)\n\tLink 0: 26.562 GB/s\n")
        argv[1] = str(smi)
    code, out, err = gpudiag(capsys, *argv)
    text = one_line(code, out, err, str(target), "not a regular file|symbolic link|directory")
    assert "'-' writes to stdout" in text or kind in ("symlink", "dangling", "directory")
    after = os.lstat(target)
    assert (after.st_mode, after.st_ino, after.st_rdev) == (
        before.st_mode,
        before.st_ino,
        before.st_rdev,
    )
    assert kept.read_text() == "keep me"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".gpudiag-")] == []


def test_a_255_byte_target_name_is_written(tmp_path: Path, capsys) -> None:
    target = tmp_path / ("n" * 250 + ".toml")
    code, _out, err = gpudiag(
        capsys, "--root", TREE, "--nvml-replay", REPLAY, "--export", str(target)
    )
    assert code in (0, 1, 2, 3) and not err, err
    assert load(target).host == "hgx-test-01" or load(target).host


def test_tui_export_refuses_a_fifo(tmp_path: Path, good_snapshot: Path) -> None:
    from textual.widgets import Input, Label

    from gpudiag.tui import ExportScreen, GpudiagApp

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    app = GpudiagApp(load(good_snapshot))

    async def steps() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("e")
            assert isinstance(app.screen, ExportScreen)
            app.screen.query_one(Input).value = str(fifo)
            await pilot.press("enter")
            await pilot.pause()
            assert isinstance(app.screen, ExportScreen)
            note = str(app.screen.query_one("#export-note", Label).render())
            assert "FIFO, not a regular file" in note

    import asyncio

    asyncio.run(steps())
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


# ------------------------------------------------------------------ 2 and 3: redaction


def _strings(data: object) -> list[str]:
    if isinstance(data, str):
        return [data]
    if isinstance(data, list):
        return [s for item in data for s in _strings(item)]
    if isinstance(data, dict):
        return [s for value in data.values() for s in _strings(value)]
    return []


def assert_only_identifying_values_changed(original: dict, redacted: dict, r: Redactor) -> None:
    """Putting each placeholder back gives the original, string for string: nothing but
    the identifying values, as whole tokens, was changed."""
    back = {placeholder: value for value, placeholder in r.placeholders.items()}
    pattern = re.compile("|".join(re.escape(p) for p in sorted(back, key=len, reverse=True)))
    a, b = _strings(original), _strings(redacted)
    assert len(a) == len(b)
    changed = 0
    for before, after in zip(a, b, strict=True):
        restored = pattern.sub(lambda m: back[m.group(0)], after) if back else after
        assert restored == before, (before, after)
        changed += before != after
    assert changed > 0


def _vm_node(tmp_path: Path) -> Path:
    root = build_hgx_tree(tmp_path / "tree")
    (root / "proc/sys/kernel/hostname").write_text("vm\n")
    (root / "sys/devices/system/clocksource/clocksource0").mkdir(parents=True, exist_ok=True)
    (root / "sys/devices/system/clocksource/clocksource0/current_clocksource").write_text(
        "kvm-clock\n"
    )
    (root / "proc/cmdline").write_text(
        "BOOT_IMAGE=/vmlinuz root=UUID=0a1b2c3d-1111-2222-3333-444455556666 ro "
        "ip=10.1.2.3::10.1.2.1:255.255.255.0:vm:eth0:off BOOTIF=01-0c-42-a1-00-11-22 "
        "ipv6=fe80::e42:a1ff:fe00:1122 nfsroot=[2001:db8::17]:/home/alice/root quiet\n"
    )
    return root


def test_redaction_replaces_whole_tokens_and_nothing_else(tmp_path: Path, capsys) -> None:
    root = _vm_node(tmp_path)
    plain, redacted = tmp_path / "plain.toml", tmp_path / "redacted.toml"
    for target, extra in ((plain, []), (redacted, ["--redact"])):
        gpudiag(capsys, "--root", str(root), "--nvml-replay", DEMO, *extra, "--export", str(target))
    a, b = load(plain), load(redacted)
    text = redacted.read_text()
    assert "nvml:nvmlDeviceGetName" in text and "nhost" not in text
    assert b.reading("kernel.clocksource").value == "kvm-clock"
    assert b.host == "host-1"
    cmdline = b.reading("kernel.cmdline").value
    for secret in (
        "10.1.2.3",
        "0c-42-a1-00-11-22",
        "0a1b2c3d-1111",
        "fe80::e42",
        "2001:db8",
        "alice",
        ":vm:",
    ):
        assert secret not in text, secret
    assert ":255.255.255.0:host-1:eth0:off" in cmdline  # the netmask is no identity
    # the readings, message for message, differ only where a placeholder now stands
    r = Redactor()
    again = r.snapshot(a)
    skip = {"host.uptime"}
    assert {k: v for k, v in again.readings_by_key.items() if k not in skip} == {
        k: v for k, v in b.readings_by_key.items() if k not in skip
    }
    assert_only_identifying_values_changed(snapshot_to_dict(a), snapshot_to_dict(again), r)


def test_redaction_of_real_trees_changes_nothing_else(realdata_trees: dict[str, Path]) -> None:
    from conftest import probe_readings

    redacted_trees = []
    for name, root in realdata_trees.items():
        readings = probe_readings(root, "replay-2gpu.toml")
        data = {
            "schema_version": 1,
            "gpudiag_version": "0",
            "host": str(
                readings["host.hostname"].value
                if readings.get("host.hostname") and readings["host.hostname"].ok
                else "unknown"
            ),
            "created": "2026-11-23T00:00:00Z",
            "command_line": [],
            "probes": [
                {
                    "name": "all",
                    "status": "ok",
                    "duration_s": 0.0,
                    "readings": [
                        {"key": r.key, "value": r.value, "status": "ok"}
                        if r.ok
                        else {"key": r.key, "status": r.status.value, "reason": r.reason}
                        for r in readings.values()
                    ],
                }
            ],
            "kernels": [],
            "findings": [],
            "end": {"probes": 1, "readings": len(readings), "kernels": 0, "findings": 0},
        }
        snapshot = snapshot_from_dict(data)
        r = Redactor()
        redacted = r.snapshot(snapshot)
        if r.placeholders:
            assert_only_identifying_values_changed(
                snapshot_to_dict(snapshot), snapshot_to_dict(redacted), r
            )
            redacted_trees.append(name)
    assert len(redacted_trees) >= 2, redacted_trees  # gb10 and procfs fixtures hold some


def test_fqdn_short_name_and_the_export_path_are_redacted(tmp_path: Path, capsys) -> None:
    root = build_hgx_tree(tmp_path / "tree")
    (root / "proc/sys/kernel/hostname").write_text("gpu07.cluster.example.org\n")
    (root / "proc/cmdline").write_text("ro ip=10.9.8.7::10.9.8.1:255.255.0.0:gpu07:ib0:off\n")
    target = tmp_path / "gpu07.toml"
    gpudiag(
        capsys, "--root", str(root), "--nvml-replay", REPLAY, "--redact", "--export", str(target)
    )
    text = target.read_text()
    assert "gpu07" not in text and "example.org" not in text.replace("host-1", "")
    assert load(target).command_line[-1].endswith("/host-2.toml")


def test_import_redacts_and_redact_is_refused_where_nothing_is_written(
    tmp_path: Path, capsys
) -> None:
    smi = tmp_path / "q.xml"
    smi.write_text(
        "<?xml version='1.0'?><nvidia_smi_log><driver_version>550.1</driver_version>"
        "<attached_gpus>1</attached_gpus><hostname>node-a17</hostname><gpu id='0'>"
        "<uuid>GPU-01234567-89ab-cdef-0123-456789abcdef</uuid><serial>1650000000000</serial>"
        "</gpu></nvidia_smi_log>"
    )
    out = tmp_path / "o.toml"
    gpudiag(capsys, "--redact", "import", str(smi), "-o", str(out))
    text = out.read_text()
    assert "node-a17" not in text and "GPU-0123" not in text and "1650000000000" not in text
    code, _, err = gpudiag(capsys, "--redact", "check", str(out))
    assert code == 3 and "--redact goes with" in err


def test_redact_key_gives_placeholders_stable_across_exports(tmp_path: Path, capsys) -> None:
    key, other = tmp_path / "key", tmp_path / "other"
    key.write_bytes(os.urandom(32))
    other.write_bytes(os.urandom(32))
    hosts = []
    for n, k in enumerate((key, key, other)):
        target = tmp_path / f"{n}.toml"
        gpudiag(
            capsys,
            "--root",
            TREE,
            "--nvml-replay",
            DEMO,
            "--redact",
            "--redact-key",
            str(k),
            "--export",
            str(target),
        )
        snap = load(target)
        hosts.append((snap.host, snap.reading("gpu.0.uuid").value))
    assert hosts[0] == hosts[1] != hosts[2]
    assert re.fullmatch(r"host-[0-9a-f]{12}", hosts[0][0])
    short = tmp_path / "short"
    short.write_text("abc")
    code, _, err = gpudiag(
        capsys,
        "--root",
        TREE,
        "--redact",
        "--redact-key",
        str(short),
        "--export",
        str(tmp_path / "x.toml"),
    )
    one_line(code, "", err, str(short), "at least 16 bytes")


# ------------------------------------------------------------------ 4: --root is a chroot


def test_root_symlinks_resolve_inside_the_root(tmp_path: Path, capsys) -> None:
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$SECRET-HASH:19000:0:99999:7:::\n")
    root = build_hgx_tree(tmp_path / "tree")
    (root / "proc/cmdline").unlink()
    (root / "proc/cmdline").symlink_to(secret)  # absolute, out of the tree
    (root / "etc/os-release").unlink()
    (root / "etc/os-release").symlink_to("../../../../../../" + str(secret))  # climbing
    (root / "etc/hostname").write_text("inside\n")
    (root / "proc/sys/kernel/hostname").unlink()
    (root / "proc/sys/kernel/hostname").symlink_to("/etc/hostname")  # absolute, in the tree
    target = tmp_path / "out.toml"
    gpudiag(capsys, "--root", str(root), "--nvml-replay", REPLAY, "--export", str(target))
    text = target.read_text()
    assert "SECRET-HASH" not in text
    snap = load(target)
    assert snap.host == "inside"
    assert snap.reading("kernel.cmdline").status.value == "missing"
    host = HostFS(root)
    assert host.path("/proc/cmdline") == root / str(secret).lstrip("/")
    loop = root / "loop"
    loop.symlink_to("/loop")
    assert not host.read("/loop/x").ok
    (root / "sys/outside").symlink_to("/etc")  # globbing and listing stay inside too
    inside = sorted(p.name for p in (root / "etc").iterdir())
    assert set(host.listdir("/sys/outside")) == set(inside)
    assert [p.rsplit("/", 1)[1] for p in host.glob("/sys/outside/*")] == host.listdir("/etc")
    assert "passwd" not in host.listdir("/sys/outside") or "passwd" in inside


# ------------------------------------------------------------------ 7: parsers bound


def test_corrupt_cpu_online_is_an_error_not_gigabytes(tmp_path: Path, capsys) -> None:
    with pytest.raises(ValueError, match="more than 8192 CPUs"):
        parse_cpulist("0-100000000")
    with pytest.raises(ValueError, match="wider than 8192 bits"):
        parse_cpumask("f" * 5000)
    assert parse_cpulist("0-8191")[-1] == 8191
    root = build_hgx_tree(tmp_path / "tree")
    (root / "sys/devices/system/cpu/online").write_text("0-100000000\n")
    target = tmp_path / "out.toml"
    started = time.monotonic()
    gpudiag(capsys, "--root", str(root), "--nvml-replay", REPLAY, "--export", str(target))
    assert time.monotonic() - started < 20
    online = load(target).reading("cpu.online")
    assert online.status.value == "error" and "more than 8192 CPUs" in online.reason


def test_host_files_are_bounded_and_regular(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    (root / "proc").mkdir(parents=True)
    os.mkfifo(root / "proc/cmdline")
    (root / "proc/zero").symlink_to("/dev/zero")  # the tree's own /dev/zero, as in a chroot
    if os.geteuid() == 0:
        (root / "dev").mkdir()
        os.mknod(root / "dev/zero", stat.S_IFCHR | 0o666, os.makedev(1, 5))
    (root / "proc/big").write_bytes(b"1" * (2 * 1024 * 1024))
    host = HostFS(root)
    started = time.monotonic()
    fifo = host.read("/proc/cmdline")
    assert time.monotonic() - started < 1 and not fifo.ok and "not a regular file" in fifo.reason
    zero = host.read("/proc/zero").reason
    assert ("not a regular file" if os.geteuid() == 0 else "not found") in zero
    assert "larger than 1048576 bytes" in host.read("/proc/big").reason


# ------------------------------------------------------------------ 8: inputs


def test_inputs_from_stdin_and_gzip(tmp_path: Path, good_snapshot: Path) -> None:
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "gpudiag", "check", "-"],
        input=good_snapshot.read_text(),
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
        timeout=60,
    )
    assert result.returncode in (0, 1, 2, 3) and "Traceback" not in result.stderr
    assert result.stdout.startswith(f"{load(good_snapshot).host}:")
    bomb = tmp_path / "bomb.log.gz"
    bomb.write_bytes(gzip.compress(b"\n" * (8 * 1024 * 1024)))
    with pytest.raises(inputs.InputError, match="unpacked, larger than 1 MiB"):
        inputs.read_input(bomb, gzip_ok=True, max_bytes=1024 * 1024)
    assert inputs.read_input(bomb, max_bytes=1024 * 1024).startswith(b"\x1f\x8b")
    result = run_cli("view", "-")
    assert result.returncode == 3 and "names a snapshot file" not in result.stderr
    assert "view reads the keyboard" in result.stderr


def test_bug_report_gz_imports(tmp_path: Path, capsys) -> None:
    xml = (
        "<?xml version='1.0'?><nvidia_smi_log><driver_version>550.54.15</driver_version>"
        "<attached_gpus>1</attached_gpus><gpu id='0'><product_name>NVIDIA H100</product_name>"
        "</gpu></nvidia_smi_log>"
    )
    report = tmp_path / "nvidia-bug-report.log.gz"
    report.write_bytes(gzip.compress(("*** nvidia-smi -q -x\n" + xml + "\n").encode()))
    out = tmp_path / "o.toml"
    gpudiag(capsys, "import", str(report), "-o", str(out))
    assert load(out).reading("gpu.0.name").value == "NVIDIA H100"


# ------------------------------------------------------------------ 9: non-finite numbers


@pytest.mark.parametrize("field", ["duration", "stats", "params", "json"])
def test_non_finite_numbers_are_refused_in_snapshots(
    field: str, good_snapshot: Path, tmp_path: Path, capsys
) -> None:
    text = good_snapshot.read_text()
    bad = tmp_path / "bad.toml"
    if field == "duration":
        bad.write_text(re.sub(r"duration_s = [0-9.e-]+", "duration_s = nan", text, count=1))
    elif field == "json":
        data = json.loads(dumps(load(good_snapshot), as_json=True))
        data["probes"][0]["duration_s"] = "NaN-MARK"
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps(data).replace('"NaN-MARK"', "NaN"))
    else:
        data = snapshot_to_dict(load(good_snapshot))
        kernel = {
            "kernel": "stream",
            "device": "cpu",
            "metric": "triad",
            "status": "ok",
            "samples": [1.0],
            "params": {"n": 1},
        }
        if field == "params":
            kernel["params"] = {"n": float("inf")}
        else:
            kernel["stats"] = {
                "count": 2,
                **dict.fromkeys(
                    ("median", "minimum", "maximum", "mean", "cv", "ci95_low", "ci95_high"), 1.0
                ),
                "median": float("nan"),
            }
        data["kernels"] = [kernel]
        data["end"]["kernels"] = 1
        bad.write_text(tomli_w.dumps(data))
    code, out, err = gpudiag(capsys, "check", str(bad))
    one_line(code, out, err, str(bad), "non-finite")


def test_non_finite_numbers_are_refused_in_rules_and_options(tmp_path: Path, capsys) -> None:
    rule = tmp_path / "site.toml"
    rule.write_text(
        '[[rule]]\nid = "SITE001"\nseverity = "critical"\ntitle = "t"\napplies_to = "gpu"\n'
        'reading = "gpu.{gpu}.temperature.gpu"\nexpect = { min = nan }\nwhy = "w"\nfix = "f"\n'
    )
    code, out, err = gpudiag(capsys, "rules", "lint", str(rule))
    one_line(code, out, err, str(rule), "non-finite")
    for argv in (
        ["run", "stream", "--seconds", "inf"],
        ["run", "stream", "--seconds", "nan"],
        ["--timeout-scale", "inf", "--root", TREE, "--export", "-"],
        ["--timeout-scale", "nan", "--root", TREE, "--export", "-"],
    ):
        code, out, err = gpudiag(capsys, *argv)
        assert code == 3 and "finite number" in err and len(err.splitlines()) == 1, err


# ------------------------------------------------------------------ 10: lint is load


def test_lint_refuses_what_loading_refuses(tmp_path: Path, capsys) -> None:
    rule = (
        '[[rule]]\nid = "{id}"\nseverity = "warning"\ntitle = "t"\napplies_to = "node"\n'
        'reading = "cpu.logical"\nexpect = {{ min = 1 }}\nwhy = "w"\nfix = "f"\n'
    )
    dup = tmp_path / "dup.toml"
    dup.write_text(rule.format(id="SITE001") + rule.format(id="SITE001"))
    unknown = tmp_path / "unknown.toml"
    unknown.write_text('[[override]]\nid = "NOPE999"\ndisabled = true\n')
    for path, problem in ((dup, "duplicate id"), (unknown, "override of unknown rule NOPE999")):
        code, out, err = gpudiag(capsys, "rules", "lint", str(path))
        one_line(code, out, err, str(path), problem)
        code, out, err = gpudiag(capsys, "--rules", str(tmp_path), "rules", "list")
        assert code == 3
        path.unlink()
    good = tmp_path / "good.toml"
    good.write_text(rule.format(id="SITE001") + '[[override]]\nid = "GPU004"\ndisabled = true\n')
    code, out, _ = gpudiag(capsys, "rules", "lint", str(good))
    assert code == 0 and "ok (1 rules, 1 overrides)" in out
    code, _, _ = gpudiag(capsys, "--rules", str(tmp_path), "rules", "list")
    assert code == 0


# ------------------------------------------------------------------ 11: escape sequences

HOSTILE = "evil\x1b]0;pwned\x07\x1b[2J\x1b[31mred\x9b1m\r"


def test_escape_sequences_never_reach_the_terminal(
    good_snapshot: Path, tmp_path: Path, capsys
) -> None:
    data = json.loads(dumps(load(good_snapshot), as_json=True))
    data["host"] = HOSTILE
    data["probes"][0]["readings"][0]["value"] = HOSTILE
    bad = tmp_path / "hostile.json"
    bad.write_text(json.dumps(data))
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "site.toml").write_text(
        '[[rule]]\nid = "SITE001"\nseverity = "warning"\ntitle = "t\\u001b[5m"\n'
        'applies_to = "node"\nreading = "cpu.logical"\nexpect = { min = 100000 }\n'
        'message = "{value} CPUs \\u001b]8;;http://x\\u0007link\\u001b[0m"\nwhy = "w"\n'
        'fix = "f"\n'
    )
    for argv in (
        ["--rules", str(rules), "check", str(bad)],
        ["diff", "--format", "text", str(good_snapshot), str(bad)],
        ["diff", "--format", "markdown", str(good_snapshot), str(bad)],
    ):
        code, out, err = gpudiag(capsys, *argv)
        assert code in (0, 1, 2), err
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", out + err), repr(out + err)
        assert "evil" in out
    assert "red" in load(bad).host and "\x1b" not in load(bad).host
    from gpudiag.nvml import plain

    assert plain(b"NVIDIA\x1b[2J H100\x00\x00") == "NVIDIA H100"  # from the driver, too


# ------------------------------------------------------------------ 12: internal errors


def _xml(gpu: str) -> str:
    return (
        "<?xml version='1.0'?><nvidia_smi_log><driver_version>550.1</driver_version>"
        f"<attached_gpus>1</attached_gpus><gpu id='0'>{gpu}</gpu></nvidia_smi_log>"
    )


def test_bad_numbers_in_xml_are_readings_in_error(tmp_path: Path, capsys) -> None:
    xml = tmp_path / "q.xml"
    xml.write_text(
        _xml(
            "<processes><process_info><pid>abc</pid><type>C</type></process_info></processes>"
            f"<fb_memory_usage><total>{'9' * 400} MiB</total></fb_memory_usage>"
            f"<power_readings><power_draw>{'9' * 400}.5 W</power_draw></power_readings>"
        )
    )
    out = tmp_path / "o.toml"
    _code, _, err = gpudiag(capsys, "import", str(xml), "-o", str(out))
    assert "internal error" not in err and out.exists(), err
    snap = load(out)
    for key in ("gpu.0.processes.compute", "gpu.0.memory.total", "gpu.0.power.draw"):
        assert snap.reading(key).status.value == "error", key


def test_huge_integers_and_deep_nesting_in_replays(tmp_path: Path, capsys) -> None:
    for name, text in (
        ("big.toml", f'format = "gpudiag-nvml-replay"\nversion = {BIG}\n'),
        ("deep.json", '{"format": ' + "[" * 5000 + "]" * 5000 + "}"),
        ("deep.toml", 'format = "gpudiag-nvml-replay"\nversion = 1\n' + NESTED),
        (
            "code.json",
            '{"format": "gpudiag-nvml-replay", "version": 1, "system": {"x": {"error": ["list"]}}}',
        ),
    ):
        path = tmp_path / name
        path.write_text(text)
        code, out, err = gpudiag(
            capsys, "--root", TREE, "--nvml-replay", str(path), "--export", str(tmp_path / "o.toml")
        )
        one_line(code, out, err, str(path))


def test_bad_kernel_sizes_are_usage_errors(capsys) -> None:
    for argv, problem in (
        (["run", "gemm", "--gemm-n", "0"], "--gemm-n: must be a whole number at least 1"),
        (["run", "stream", "--size", "1000T"], "exceed this machine's memory"),
        (["run", "burn", "--gemm-n", str(10**8)], "exceed this machine's memory"),
    ):
        code, _out, err = gpudiag(capsys, *argv)
        assert code == 3 and problem in err and len(err.splitlines()) == 1, err


def test_export_to_a_closed_stdout(tmp_path: Path) -> None:
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "gpudiag", "--root", TREE, "--nvml-replay", REPLAY, "--export", "-"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        check=False,
        preexec_fn=lambda: os.close(1),
        timeout=60,
    )
    assert result.returncode == 3
    assert result.stderr.strip() == "gpudiag: --export -: standard output is closed"


def test_reading_value_check_still_holds() -> None:
    with pytest.raises(ValueError):
        Reading("x", float("nan"))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # '_' cannot be in a host name, so it ends a token: gpu01_snap.toml is redacted too
        ("nvml:nvmlDeviceGetName kvm-clock vm_1", "nvml:nvmlDeviceGetName kvm-clock host-1_1"),
        (
            "vm ip=10.1.2.3::10.1.2.1:255.255.255.0:vm:eth0",
            "host-1 ip=ip-1::ip-2:255.255.255.0:host-1:eth0",
        ),
        ("BOOTIF=01-0c-42-a1-00-11-22 hw 0c:42:a1:00:11:22", "BOOTIF=mac-2 hw mac-1"),
        ("ib 80:00:00:48:fe:80:00:00:00:00:00:00:0c:42:a1:03:00:11:22:33", "ib mac-1"),
        ("fe80::e42:a1ff:fe00:1122%ib0 2001:db8::1 ::1 127.0.0.1", "ip-1%ib0 ip-2 ::1 127.0.0.1"),
        ("root=UUID=0a1b2c3d-1111-2222-3333-444455556666", "root=UUID=uuid-1"),
        ("GPU-01234567-89ab-cdef-0123-456789abcdef", "uuid-1"),
        ("/home/alice/x.toml /Users/bob", "/home/user-1/x.toml /Users/user-2"),
        (
            "0::/user.slice/user-1000.slice/session-3.scope",
            "0::/user.slice/user-uid-1.slice/session-3.scope",
        ),
        ("/slurm/uid_4242/job_17", "/slurm/uid_uid-1/job_17"),
        (
            "0000:1b:00.0 12:30:45 535.104.05 96.00.74.00.01",
            "0000:1b:00.0 12:30:45 535.104.05 96.00.74.00.01",
        ),
    ],
)
def test_redaction_by_example(text: str, expected: str) -> None:
    r = Redactor()
    r.learn("vm", [])
    assert r.text(text) == expected
