"""The command line end to end, in a subprocess, on recorded host trees."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpudiag.model import Severity
from gpudiag.probes import default_probes
from gpudiag.snapshot import load, loads

from conftest import FIXTURES, REPO, modules_loaded_by, probe_readings, run_cli

TREE = str(FIXTURES / "host-basic")
REPLAY = str(FIXTURES / "replay-2gpu.toml")  # GPU 1 is lost
HEALTHY = str(FIXTURES.parent.parent / "snapshots" / "demo-hgx-h100-healthy.toml")


def _one_line_error(result, expected: str) -> None:
    assert result.returncode == 3, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("gpudiag: ")
    assert expected in result.stderr
    assert "Traceback" not in result.stderr


def test_export_then_check_reads_it_back(tmp_path: Path) -> None:
    target = tmp_path / "node.toml"
    export = run_cli("--root", TREE, "--nvml-replay", REPLAY, "--export", str(target))
    # GPU 1 is lost: critical. The small host tree lacks most host files: those rules
    # say they cannot check (unknown), and HOST002, an info rule, says so at info.
    assert export.returncode == 2, export.stderr
    probes = len(default_probes())
    assert re.fullmatch(
        rf"gpunode01: {probes} probes \({probes} ok\), \d+ readings; "
        r"findings: \d+ critical, \d+ warning, \d+ unknown, \d+ info; "
        r"rules: \d+ checked, \d+ did not apply, \d+ could not check",
        export.stdout.splitlines()[0],
    )
    assert "CRITICAL GPU001   GPU 1: does not answer NVML: nvmlDeviceGetName: GpuIsLost" in (
        export.stdout
    )
    assert "INFO     HOST002  node: cannot check: host.virt.container is missing" in export.stdout
    assert export.stdout.splitlines()[-1] == f"wrote {target} (TOML)"
    text = target.read_text()
    assert text.startswith("schema_version = 2\n")
    assert 'host = "gpunode01"' in text
    check = run_cli("check", str(target))
    assert check.returncode == 2, check.stderr
    assert check.stdout.splitlines()[0] == export.stdout.splitlines()[0]
    # one set of counts: health says what the export and check say, in the same words
    tally = export.stdout.splitlines()[0].split("; rules: ")[1]
    nagios = run_cli("--root", TREE, "--nvml-replay", REPLAY, "health").stdout.splitlines()[0]
    assert re.search(r"; rules: ([^;|]+?) ?[;|]", nagios)[1] == tally, nagios


def test_export_json_and_stdout_hold_the_same_content(tmp_path: Path) -> None:
    as_json = tmp_path / "node.json"
    run_cli("--root", TREE, "--nvml-replay", REPLAY, "--export", str(as_json))
    assert json.loads(as_json.read_text())["schema_version"] == 2
    stdout = run_cli("--root", TREE, "--nvml-replay", REPLAY, "--export", "-")
    assert stdout.returncode == 2
    assert stdout.stdout.startswith("schema_version = 2\n")
    # the summary goes to stderr with '-'
    assert f"gpunode01: {len(default_probes())} probes" in stdout.stderr
    from_json, from_toml = load(as_json), loads(stdout.stdout)
    uptime = "host.uptime"  # the only reading that moves between the two runs
    assert {k: r for k, r in from_json.readings_by_key.items() if k != uptime} == {
        k: r for k, r in from_toml.readings_by_key.items() if k != uptime
    }
    assert from_json.findings == from_toml.findings


def test_exit_codes_follow_the_worst_finding(tmp_path: Path) -> None:
    no_driver = run_cli(
        "--root",
        TREE,
        "--nvml-replay",
        str(FIXTURES / "replay-no-driver.toml"),
        "--export",
        str(tmp_path / "a.toml"),
    )
    assert no_driver.returncode == 2
    assert "CRITICAL NVML001  node: NVML could not be initialised: nvmlInit: DriverNotLoaded" in (
        no_driver.stdout
    )
    assert "UNKNOWN  NVML002" in no_driver.stdout
    no_gpus = run_cli(
        "--root",
        TREE,
        "--nvml-replay",
        str(FIXTURES / "replay-no-gpus.json"),
        "--export",
        str(tmp_path / "b.toml"),
    )
    assert no_gpus.returncode == 2
    assert "CRITICAL NVML002  node: NVML answers but reports 0 GPUs" in no_gpus.stdout


def test_site_rules_change_the_verdict(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "site.toml").write_text(
        '[[rule]]\nid = "SITE001"\nseverity = "warning"\ntitle = "old kernel"\n'
        'applies_to = "node"\nreading = "host.kernel.release"\n'
        'expect = { not_in = ["5.15.0-105-generic"] }\nwhy = "w"\nfix = "f"\n'
    )
    snapshot = tmp_path / "node.toml"
    export = run_cli("--root", TREE, "--nvml-replay", HEALTHY, "--export", str(snapshot))
    # the small host tree has no PCIe devices, so NVML's 8 GPUs are more than the bus
    # lists (GPU031, a warning)
    assert export.returncode == 1, export.stdout
    assert "WARNING  GPU031" in export.stdout
    (rules / "site.toml").write_text(
        (rules / "site.toml").read_text() + '[[override]]\nid = "GPU031"\ndisabled = true\n'
    )
    check = run_cli("--rules", str(rules), "check", str(snapshot))
    assert check.returncode == 1, check.stdout  # the site warning is now the worst finding
    assert "WARNING  SITE001  node: host.kernel.release is 5.15.0-105-generic" in check.stdout
    assert "GPU031" not in check.stdout


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--root", "/nonexistent/tree", "--export", "-"],
            "--root /nonexistent/tree: no such directory",
        ),
        (
            ["--nvml-replay", "/nonexistent.toml", "--export", "-"],
            "/nonexistent.toml: no such file",
        ),
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["check"], "the following arguments are required: SNAPSHOT"),
        (["check", "/nonexistent.toml"], "/nonexistent.toml: no such file"),
        (
            ["--rules", "/nonexistent", "--export", "-"],
            "/nonexistent: not a directory of rule files",
        ),
        (
            ["--timeout-scale", "0", "--export", "-"],
            "--timeout-scale: must be a finite number above 0",
        ),
        (
            ["--root", TREE, "--nvml-replay", REPLAY, "--export", "/nonexistent/dir/x.toml"],
            "directory /nonexistent/dir does not exist",
        ),
    ],
)
def test_bad_arguments_give_one_line_and_exit_3(args: list[str], expected: str) -> None:
    _one_line_error(run_cli(*args), expected)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"", "file is empty"),
        (b"\x00\x01\x02binary", "binary data"),
        (b"schema_version = 2\nhost = ", "not valid TOML"),
        (b"schema_version = 42\n", "schema version 42 is not supported"),
        (b'{"schema_version": "one"}', "schema_version: expected an integer"),
    ],
)
def test_check_rejects_bad_snapshots(tmp_path: Path, content: bytes, expected: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_bytes(content)
    result = run_cli("check", str(path))
    _one_line_error(result, f"{path}: {expected}")


def test_truncated_export_is_rejected(tmp_path: Path) -> None:
    good = tmp_path / "node.toml"
    run_cli("--root", TREE, "--nvml-replay", REPLAY, "--export", str(good))
    text = good.read_text()
    cut = tmp_path / "cut.toml"
    cut.write_text(text[: text.index("[[probes]]", text.index("[[probes]]") + 1)])
    _one_line_error(run_cli("check", str(cut)), "truncated")


def test_bad_rule_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "bad.toml").write_text('[[rule]]\nid = "X001"\nseverity = "grave"\n')
    result = run_cli(
        "--rules", str(tmp_path), "--root", TREE, "--nvml-replay", REPLAY, "--export", "-"
    )
    _one_line_error(result, f"{tmp_path / 'bad.toml'}:1: rule X001:")


def test_export_over_a_directory_is_refused_and_keeps_it(tmp_path: Path) -> None:
    result = run_cli("--root", TREE, "--nvml-replay", REPLAY, "--export", str(tmp_path))
    _one_line_error(result, "is a directory")
    assert tmp_path.is_dir()


def test_version_and_help() -> None:
    version = run_cli("--version")
    assert version.returncode == 0 and version.stdout.startswith("gpudiag ")
    help_text = run_cli("--help")
    assert help_text.returncode == 0
    for option in ("--root", "--nvml-replay", "--export", "check", "view", "Exit codes"):
        assert option in help_text.stdout


def test_version_alone_is_answered_as_the_parser_answers_it(capsys) -> None:
    """`gpudiag --version` is answered by the entry point without loading the command
    line: the same output as the parser's --version."""
    from gpudiag.cli import build_parser

    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["--version"])
    assert exited.value.code == 0
    parsed = capsys.readouterr().out
    version = run_cli("--version")
    assert version.returncode == 0 and version.stdout == parsed and version.stderr == ""


def test_help_and_version_load_no_command_implementation() -> None:
    """The parser (--help) loads no probe, rules engine, session, catalog or NumPy: each
    command imports what it needs when it runs; the exit code of bad input is session's."""
    loaded = modules_loaded_by("from gpudiag import cli", "cli.build_parser().format_help()")
    heavy = {
        "gpudiag.session", "gpudiag.probes", "gpudiag.ruleengine", "gpudiag.rulefile",
        "gpudiag.derive", "gpudiag.catalog", "gpudiag.snapshot", "gpudiag.diff", "numpy",
    }  # fmt: skip
    assert not heavy & loaded, heavy & loaded
    assert not {"typing", "shutil"} & loaded  # issue 44: 3.6 and 3 ms of --help's 35
    from gpudiag import cli, session

    assert cli._EXIT_UNKNOWN == session.EXIT_UNKNOWN


# What `check` and `diff` do not use, and so must not import (issue 44: each is
# milliseconds of a command whose whole budget is about 40): the standard modules that
# dataclasses imports for what gpudiag does not call (copy, inspect: stand-ins until
# used, gpudiag/__init__.py; Python 3.12's dataclasses use inspect for every class);
# statistics (a median of GPU kernel figures) and threading (a live node's cancel event),
# imported where used; shutil, which argparse's formatter imports for the terminal's
# width (cli._Formatter); typing (gpudiag's modules on these paths name it for
# annotations only).
NOT_FOR_CHECK = {
    "ast", "tokenize", "weakref", "statistics", "threading", "shutil", "typing",
    "datetime",  # a snapshot's time in gpudiag's form is checked without it
    "gpudiag.hostfs",  # a saved snapshot reads no host file (natural_key is catalog's)
    "gpudiag.stats",  # diff's kernel metrics' statistics, where there are kernel results
    *(("dis",) if sys.version_info < (3, 12) else ()),
}  # fmt: skip


def test_check_and_diff_import_only_what_they_use(tmp_path: Path) -> None:
    """A fresh process that runs `diff` and `check` on saved snapshots without kernel
    results (with them, diff's bootstrap imports NumPy, which imports inspect) holds none
    of NOT_FOR_CHECK (nor the real `inspect` and `copy`, before Python 3.12)."""
    data = json.loads((REPO / "tests" / "golden" / "rendered.json").read_text())
    data["kernels"], data["end"]["kernels"] = [], 0
    snapshot = tmp_path / "node.json"
    snapshot.write_text(json.dumps(data))
    run = (  # as the `gpudiag` command runs them (gpudiag.entry.main, sys.argv)
        "from gpudiag.entry import main\n"
        "import os\n"
        "out, sys.stdout = sys.stdout, open(os.devnull, 'w')\n"
        f"sys.argv = ['gpudiag', 'diff', {str(snapshot)!r}, {str(snapshot)!r}]\n"
        "assert main() == 0\n"
        f"sys.argv = ['gpudiag', 'check', {str(snapshot)!r}]\n"
        "assert main() in (0, 1, 2)\n"  # read and judged
        "sys.stdout = out\n"
        "print(type(sys.modules['copy']).__name__, type(sys.modules['inspect']).__name__)"
    )
    loaded = modules_loaded_by(run)
    assert not NOT_FOR_CHECK & loaded, NOT_FOR_CHECK & loaded
    assert {"gpudiag.session", "gpudiag.diff"} <= loaded  # both ran
    if sys.version_info < (3, 12):
        assert "_OnFirstUse" in loaded  # copy's and inspect's stand-ins, never used


def test_check_imports_neither_pathlib_nor_argparse() -> None:
    """`gpudiag check SNAPSHOT` (no --rules, and no site rules folder) imports neither
    pathlib nor argparse (issue 44: 3 ms of the command each): the shipped rule and
    profile files are found by os.path, and check's own options are read by
    commands/check.py's plain_arguments. Both are dropped from sys.modules first (an
    editable install's path finder imports pathlib at every start), so that an import by
    gpudiag would load them again."""
    rendered = str(REPO / "tests" / "golden" / "rendered.json")
    loaded = modules_loaded_by(
        "import os",
        "sys.modules.pop('pathlib', None), sys.modules.pop('argparse', None)",
        "from gpudiag.entry import main",
        f"sys.argv, sys.stdout = ['gpudiag', 'check', {rendered!r}], open(os.devnull, 'w')",
        "assert main() in (0, 1, 2)",
        "sys.stdout = sys.__stdout__",
    )
    assert "gpudiag.ruleengine" in loaded and not {"pathlib", "argparse"} & loaded


# check's command lines that plain_arguments reads (as argparse does), and those it
# leaves to argparse (which reads them otherwise, or refuses them)
PLAIN_CHECKS = (
    ["check", "node.json"],
    ["check", "-"],
    ["check", ""],
    ["check", "node.json", "--format", "json"],
    ["check", "--format=junit", "node.json"],
    ["check", "n", "--rules", "r1", "--rules=r2", "--profile", "h100-sxm", "--prometheus",
     "out.prom", "--format", "toml", "--format", "prometheus"],
    ["check", "n", "--profile=x", "--profile", "y", "--prometheus=p"],
)  # fmt: skip
ARGPARSE_CHECKS = (
    ["check"], ["check", "a", "b"], ["check", "-h"], ["check", "a", "--help"],
    ["check", "a", "--form", "json"], ["check", "a", "--format", "xml"],
    ["check", "a", "--rules"], ["check", "a", "--rules="], ["check", "a", "--profile", "-x"],
    ["check", "--", "a"], ["check", "a", "--redact"], ["check", "-1"], ["check", "a", "-"],
    ["check", "a", "--root", "/"], ["--root", "/", "check", "a"],
)  # fmt: skip


def test_check_reads_its_options_without_argparse_as_argparse_does() -> None:
    from gpudiag import cli
    from gpudiag.commands.check import plain_arguments

    for argv in PLAIN_CHECKS:
        assert vars(plain_arguments(argv)) == vars(cli.build_parser().parse_args(argv)), argv
    for argv in ARGPARSE_CHECKS:
        assert plain_arguments(argv) is None, argv


def test_a_program_importing_gpudiag_keeps_its_standard_modules() -> None:
    """The stand-ins for copy and inspect are the `gpudiag` command's (gpudiag.entry),
    never a library importer's: a program that imports gpudiag's model and judges with
    it (and dataclasses, which gpudiag's records no longer import) holds the real
    modules."""
    loaded = modules_loaded_by(
        "import gpudiag.model, gpudiag.ruleengine, dataclasses",
        "print(type(sys.modules['inspect']).__name__, type(sys.modules['copy']).__name__)",
    )
    assert "_OnFirstUse" not in loaded and {"inspect", "copy"} <= loaded


def test_check_and_diff_pause_the_collector(monkeypatch: pytest.MonkeyPatch) -> None:
    """check and diff load, judge and compare with the cyclic garbage collector paused
    (issue 44: its passes over a 64-GPU snapshot's readings were a tenth of the CPU
    time); called in a process that goes on, they leave it running and nothing frozen;
    as the process's command (gpudiag.entry), they freeze what they made before it
    resumes."""
    import gc

    from gpudiag import cli, snapshot

    seen: list[bool] = []
    load = snapshot.load
    monkeypatch.setattr(snapshot, "load", lambda path: seen.append(gc.isenabled()) or load(path))
    rendered = str(REPO / "tests" / "golden" / "rendered.json")
    frozen = gc.get_freeze_count()
    assert cli.main(["check", rendered]) in (0, 1, 2)
    assert cli.main(["diff", rendered, rendered, "--format", "json"]) == 0
    assert seen == [False, False, False] and gc.isenabled()
    assert gc.get_freeze_count() == frozen
    code = (
        "import gc, os, sys\n"
        f"sys.argv = ['gpudiag', 'check', {rendered!r}]\n"
        "sys.stdout = open(os.devnull, 'w')\n"
        "from gpudiag.entry import main\n"
        "assert main() in (0, 1, 2)\n"
        "sys.stderr.write(f'{gc.isenabled()} {gc.get_freeze_count() > 0}')"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stderr == "True True", result.stderr
    # --help: the command line imported with the collector paused, then frozen
    code = (
        "import gc, os, sys\n"
        "sys.argv, sys.stdout = ['gpudiag', '--help'], open(os.devnull, 'w')\n"
        "from gpudiag.entry import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "sys.stderr.write(f'{gc.isenabled()} {gc.get_freeze_count() > 0}')"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stderr == "True True", result.stderr


def test_help_imports_only_the_parser() -> None:
    """`gpudiag --help` in a fresh process without site (no editable install's finder,
    which imports pathlib at every start): none of what reading or writing files needs
    (pathlib, json, zlib), what only annotations name (typing), nor shutil (issue 44)."""
    code = (
        f"import sys; sys.path.insert(0, {str(REPO)!r})\n"
        "from gpudiag import cli\n"
        "cli.build_parser().format_help()\n"
        "print(' '.join(sorted(sys.modules)))"
    )
    result = subprocess.run(
        [sys.executable, "-S", "-c", code], capture_output=True, text=True, check=True
    )
    loaded = set(result.stdout.split())
    assert "gpudiag.cli" in loaded
    assert not {"pathlib", "json", "zlib", "typing", "shutil"} & loaded


@pytest.mark.parametrize("columns", [None, "123", "40", "0", "-5", "wide"])
def test_help_width_is_shutils(monkeypatch: pytest.MonkeyPatch, columns: str | None) -> None:
    """The parser's help width (termtext.terminal_columns, which spares --help importing
    shutil) is shutil.get_terminal_size()'s, whatever COLUMNS says."""
    import shutil

    from gpudiag import cli, termtext

    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    assert termtext.terminal_columns() == shutil.get_terminal_size().columns
    assert cli._Formatter("gpudiag")._width == shutil.get_terminal_size().columns - 2


def test_live_node_without_gpu_driver_here(tmp_path: Path) -> None:
    """On this machine (no NVIDIA driver) the real backend must say why, not crash."""
    import ctypes.util

    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("this machine has libnvidia-ml: the no-driver path cannot be shown here")
    target = tmp_path / "node.toml"
    result = run_cli("--export", str(target))
    assert "Traceback" not in result.stderr and target.exists(), result.stderr
    snapshot = load(target)
    init = snapshot.reading("nvml.init")
    assert init is not None and "NVML library not found (libnvidia-ml.so.1)" in init.reason
    (nvml001,) = [f for f in snapshot.findings if f.rule_id == "NVML001"]
    gpus = snapshot.reading("node.nvidia_gpus")
    if gpus is not None and gpus.ok and gpus.value is False:  # no NVIDIA GPU on this bus
        assert nvml001.severity is Severity.NOT_APPLICABLE
        assert "no NVIDIA GPU on this node" in nvml001.message
    else:  # a GPU on the bus (or the bus unread) without a driver: the worst
        assert nvml001.severity is Severity.CRITICAL and result.returncode == 2
    assert run_cli("check", str(target)).returncode == result.returncode


def test_every_realdata_tree_end_to_end(tmp_path: Path, realdata_trees: dict[str, Path]) -> None:
    for name, root in realdata_trees.items():
        target = tmp_path / f"{name}.toml"
        export = run_cli("--root", str(root), "--nvml-replay", REPLAY, "--export", str(target))
        assert export.returncode in (0, 1, 2, 3), export.stderr
        assert "Traceback" not in export.stderr
        assert target.exists(), name
        check = run_cli("check", str(target))
        assert check.returncode == export.returncode, (name, check.stderr)
        assert check.stdout.splitlines()[0] == export.stdout.splitlines()[0], name
        # the file holds what the probes read from the tree (bar the clock-driven uptime),
        # and the GPUs' counter window taken beside them (gpudiag/telemetry/readings.py)
        exported = {k: r for k, r in load(target).readings_by_key.items() if ".telemetry." not in k}
        direct = probe_readings(root, "replay-2gpu.toml")
        assert exported.keys() == direct.keys(), name
        for key, reading in direct.items():
            if key != "host.uptime":
                assert exported[key] == reading, (name, key)


@pytest.mark.parametrize("command", [[], ["demo", "faulty"], ["--replay", "DEMO"]])
def test_no_tui_when_standard_output_is_not_a_terminal(command: list[str], tmp_path: Path) -> None:
    """`ssh node gpudiag > x`, a pipe, cron: one line saying what to run instead, exit 3,
    nothing written to the file; the keyboard is a terminal (a pty), the output a file."""
    demo = REPO / "snapshots" / "demo-hgx-h100-faulty.capture.json"
    command = [str(demo) if word == "DEMO" else word for word in command]
    primary, secondary = os.openpty()
    out = tmp_path / "x"
    try:
        with out.open("w") as stdout:
            result = subprocess.run(
                [sys.executable, "-m", "gpudiag", *command],
                stdin=secondary,
                stdout=stdout,
                stderr=subprocess.PIPE,
                text=True,
                timeout=60,
                check=False,
            )
    finally:
        os.close(primary)
        os.close(secondary)
    assert result.returncode == 3 and out.read_text() == ""
    assert result.stderr.count("\n") == 1 and "standard output is not a terminal" in result.stderr
    assert "gpudiag --export -" in result.stderr and "gpudiag health" in result.stderr


def test_no_tui_in_a_pipe() -> None:
    """`gpudiag | less`, or with no terminal at all: the same one line, exit 3."""
    result = run_cli()
    assert result.returncode == 3 and result.stdout == ""
    assert result.stderr.startswith("gpudiag: standard output is not a terminal")


def test_run_help_lists_every_kernel_with_one_line() -> None:
    """`gpudiag run --help` names each kernel (allreduce and peer were not to be found),
    in a terminal of 80 columns: argparse wraps at $COLUMNS, which the suite's caller may
    have set wider (in a full run it was)."""
    from gpudiag.kernels.plans import KERNELS

    result = run_cli("run", "--help", env={"COLUMNS": "80"})
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    for kernel in KERNELS:
        (line,) = [line for line in lines if line.startswith(f"  {kernel} ")]
        assert len(line.split()) > 4, line  # a description, not just the name
    assert all(len(line) <= 80 for line in lines)


def test_the_parsers_kernel_plans_are_the_plans() -> None:
    """--kernels' choices are written out in the command line (gpudiag.kernels.plans,
    with its dataclasses, loads only when kernels run): the same names as PLANS."""
    from gpudiag.cli import KERNEL_PLANS
    from gpudiag.kernels.plans import PLANS

    assert tuple(PLANS) == KERNEL_PLANS


def test_help_lists_every_command_and_builds_only_the_one_given() -> None:
    """`gpudiag --help` lists each command with its line from COMMANDS; a command line
    builds the parser of its own command only (the others are never imported)."""
    from gpudiag import cli

    help_text = " ".join(cli.build_parser().format_help().split())
    for name, (_, line) in cli.COMMANDS.items():
        assert f"{name} {line}" in help_text
    loaded = modules_loaded_by(
        "from gpudiag import cli", "cli.build_parser().parse_args(['check', 'x.json'])"
    )
    commands = {m for m in loaded if m.startswith("gpudiag.commands.")}
    assert commands == {"gpudiag.commands.check", "gpudiag.commands.common"}, commands


def _help(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """What `gpudiag ARGV --help` prints, run in this process."""
    from gpudiag import cli

    with pytest.raises(SystemExit):
        cli.run([*argv, "--help"])
    return capsys.readouterr().out


def _described(text: str) -> list[str]:
    """The entries of --help's argument sections that no words describe."""
    bare, section = [], False
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if line.endswith(":") and not line.startswith(" "):
            section = line in ("positional arguments:", "options:")
            continue
        if section and line.startswith("  ") and not line.startswith("   "):
            entry = line.strip()
            following = lines[index + 1] if index + 1 < len(lines) else ""
            if "  " not in entry and not following.startswith("    "):
                bare.append(entry)
    return bare


def test_every_subcommand_help_says_what_it_does_and_describes_its_arguments(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from gpudiag.cli import COMMANDS

    for name, (_, line) in COMMANDS.items():
        text = _help(capsys, name)
        description = " ".join(text.split("\n\n")[1].split())
        said = "Run measurement kernels" if name == "run" else f"{line[0].upper()}{line[1:]}."
        assert description.startswith(said), (name, description)
        assert _described(text) == [], (name, _described(text))
    for action in ("list", "explain", "lint", "profiles"):
        assert _described(_help(capsys, "rules", action)) == [], action
    demo = _help(capsys, "demo")
    assert "{healthy,faulty}" in demo and "NAME" not in demo
    assert "a unit allowed as --max-input takes it" in " ".join(_help(capsys, "run").split())


def test_check_of_nvidia_smi_output_gives_the_import_command(capsys) -> None:
    from gpudiag import cli

    q = REPO.parent / "shared" / "realdata" / "h100-vm" / "nvidia-smi-q.txt"
    if not q.exists():
        pytest.skip(f"{q} is absent (../shared/realdata beside the checkout)")
    assert cli.main(["check", str(q)]) == 3
    err = capsys.readouterr().err
    assert f"{q}: nvidia-smi output (-q), not a snapshot: gpudiag import {q} -o node.toml" in err
    assert "TOML" not in err and len(err.splitlines()) == 1


def test_view_counts_the_rules_as_check_does(tmp_path: Path, monkeypatch, capsys) -> None:
    """`view` gives the TUI the rules `check` judges with, so that its overview's Rules
    line is check's (it counted without them: a third set of numbers)."""
    from gpudiag import cli, views
    from gpudiag.commands import view
    from gpudiag.panes.base import SnapshotView

    target = tmp_path / "node.json"
    assert cli.main(["--root", TREE, "--nvml-replay", REPLAY, "--export", str(target)]) == 2
    capsys.readouterr()
    assert cli.main(["check", str(target)]) == 2
    tally = capsys.readouterr().out.splitlines()[0].split("; rules: ")[1]
    opened = []

    def tui(snapshot, rules=None) -> int:
        opened.append((snapshot, rules))
        return 0

    monkeypatch.setattr(view, "tui", tui)
    assert cli.main(["view", str(target)]) == 0
    snapshot, rules = opened[0]
    shown = SnapshotView.read(snapshot, rules)
    assert dict(views.overview(snapshot, shown.rules, shown.readings))["Rules"] == tally


def test_a_broken_pipe_ends_quietly_with_sigpipes_code() -> None:
    """Review #15: `gpudiag check faulty.toml | true` exited 3 (bad input) with nothing
    said. A reader that stops early ends gpudiag quietly with 141 (128 + SIGPIPE), as a
    shell reports any command that a closed pipe ended."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line
    try:
        done = subprocess.run(
            [sys.executable, "-m", "gpudiag", "rules", "list"],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (141, "")


def test_messages_say_what_is_wrong(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review #18: `import X -o ''` said '-o : is a directory'; `diff - -` said
    '<stdin>: file is empty' (its second read); `rules lint empty.toml` said 'ok (0
    rules)' and exited 0. Each now says what is wrong, in one line, exit 3."""
    import io

    from gpudiag import cli

    empty = tmp_path / "empty.toml"
    empty.write_text("# a site's rules, none yet\n")
    monkeypatch.setattr(sys, "stdin", io.StringIO("schema_version = 2\n"))
    said = {}
    for argv in (
        ["import", str(FIXTURES / "pastes" / "q__v100-sxm2__418.67__princeton.txt"), "-o", ""],
        ["diff", "-", "-"],
        ["rules", "lint", str(empty)],
    ):
        code = cli.main(argv)
        out = capsys.readouterr()
        said[argv[0]] = (code, out.err)
    assert said["import"] == (
        3,
        "gpudiag: -o '': the path is empty: name a file ('-' writes to stdout)\n",
    )
    assert said["diff"] == (
        3,
        "gpudiag: diff - -: standard input can be read once only; name a file for A or B\n",
    )
    assert said["rules"] == (3, f"gpudiag: {empty}: holds no rules and no overrides\n")


def test_check_of_a_capture_or_an_nvml_replay_names_the_command_that_reads_it(capsys) -> None:
    """Review #9: `check` of the demo capture called it nvidia-smi output (kernel-log) and
    advised `import` (4 readings, exit 2); of the demo NVML replay it said 'no
    schema_version'. Each is gpudiag's own file: the option that reads it, with --export."""
    from gpudiag import cli

    for name, said in (
        ("demo-hgx-h100-faulty.capture.json", "a whole-node capture, not a snapshot: gpudiag"
         " --replay {path} --export node.toml"),
        ("demo-hgx-h100-healthy.toml", "an NVML replay, not a snapshot: gpudiag --nvml-replay"
         " {path} --export node.toml"),
    ):  # fmt: skip
        path = REPO / "snapshots" / name
        assert cli.main(["check", str(path)]) == 3
        err = capsys.readouterr().err
        assert err.startswith(f"gpudiag: {path}: " + said.format(path=path)), err
        assert len(err.splitlines()) == 1


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["check", "{snap}", "--prometheus", ""],
            "--prometheus '': the path is empty: name a file",
        ),
        (
            ["--replay", "{capture}", "--export", ""],
            "--export '': the path is empty: name a file ('-' writes to stdout)",
        ),
        (
            ["fleet", "{snap}", "--dataset", ""],
            "--dataset '': the path is empty: name a folder or URL",
        ),
        (["monitor", "--textfile", ""], "--textfile '': the path is empty: name a file"),
    ],
)
def test_an_empty_target_is_refused_not_taken_as_not_given(
    argv: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A review: `check --prometheus ''` wrote nothing and exited 0, `--export ''` asked
    for a terminal, `fleet --dataset ''` ran and wrote nothing: '' read as not given."""
    from gpudiag import cli

    snap = tmp_path / "node.json"
    snap.write_text("{}")
    capture = REPO / "snapshots" / "demo-hgx-h100-healthy.capture.json"
    filled = [a.format(snap=snap, capture=capture) for a in argv]
    assert cli.main(filled) == 3
    assert capsys.readouterr().err == f"gpudiag: {said}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["node.json"]
