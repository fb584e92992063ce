"""The wheel, as a user installs it: every module and data file of the source tree ships,
inside the gpudiag package and nothing else, and the installed command works outside the
checkout (the TUI in a terminal, and every subcommand) with no source tree on the path.

The wheel is built once per module from a copy of the source tree (a stale build/ folder
cannot leak into it), installed with `--no-deps --target` over this environment's
dependencies, and run with `python -S`: no .pth file runs, so the editable install's
import hook, which would quietly answer for a module the wheel lacks, is not there.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import REPO, built_wheel, realdata_dir
from tmux_pane import FAULTY_DEMO_SCREENS, start_session, tmux, wait_for, walk_screens

# The installed package's directories and the source folders they come from.
SOURCE_DIRS = {
    "gpudiag": "gpudiag",
    "gpudiag/probes": "probes",
    "gpudiag/kernels": "kernels",
    "gpudiag/rules": "rules",
    "gpudiag/snapshots": "snapshots",
}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # built once per run from a copy of the tree (conftest.built_wheel, shared with the
    # benchmarks); setuptools and wheel come with the test extra: a failed build is a
    # failure, never a skip
    return built_wheel(tmp_path_factory)["wheel"]


def _source_files() -> set[str]:
    """Every file the package is made of, by its path in the installed package: each .py,
    rule file, CUDA source and demo file under the mapped source folders."""
    files = set()
    for installed, folder in SOURCE_DIRS.items():
        base = REPO / folder
        for path in base.rglob("*"):
            relative = path.relative_to(base)
            if path.is_dir() or "__pycache__" in relative.parts or path.suffix == ".pyc":
                continue
            if folder == "gpudiag" and relative.parts[0] in {v for v in SOURCE_DIRS.values()}:
                continue
            files.add(f"{installed}/{relative.as_posix()}")
    return files


def test_wheel_holds_every_module_and_data_file_of_the_source_tree(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    shipped = {n for n in names if not n.split("/")[0].endswith(".dist-info")}
    source = _source_files()
    # the expectation is not empty or partial: the panes, the rules and the demo files
    assert {
        "gpudiag/panes/__init__.py",
        "gpudiag/panes/overview.py",
        "gpudiag/probes/host.py",
        "gpudiag/kernels/stream.cu",
        "gpudiag/rules/node.toml",
        "gpudiag/snapshots/demo-hgx-h100-faulty.capture.json",
    } <= source
    assert sorted(source - shipped) == [], "in the source tree, not in the wheel"
    assert sorted(shipped - source) == [], "in the wheel, not in the source tree"
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "gpudiag = gpudiag.entry:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


@dataclass(frozen=True)
class Installed:
    """The wheel installed in `site` (no dependencies), run from `cwd`, outside the checkout."""

    site: Path
    cwd: Path

    @property
    def env(self) -> dict[str, str]:
        # this environment's dependencies, given by path since -S reads no .pth file
        deps = [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
        return {**os.environ, "PYTHONPATH": os.pathsep.join([str(self.site), *deps])}

    @property
    def command(self) -> list[str]:
        """`gpudiag`, the console script pip wrote, without site's .pth files."""
        return [sys.executable, "-S", str(self.site / "bin" / "gpudiag")]

    def run(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.command, *args],
            cwd=self.cwd,
            env=self.env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def demo(self, name: str) -> str:
        """A demo file as installed (not the checkout's)."""
        return str(self.site / "gpudiag" / "snapshots" / name)


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    site = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
         "--target", str(site), str(wheel)],
        check=True,
        timeout=300,
    )  # fmt: skip
    return Installed(site, tmp_path_factory.mktemp("elsewhere"))


def test_the_installed_wheel_is_what_runs(installed: Installed) -> None:
    """gpudiag and its panes import from the wheel: no editable hook, no checkout."""
    script = (
        "import sys, gpudiag.panes, gpudiag.tui\n"
        "assert not [f for f in sys.meta_path if 'Editable' in repr(f)], sys.meta_path\n"
        "print(gpudiag.__file__, gpudiag.panes.__file__, gpudiag.tui.__file__)\n"
    )
    result = subprocess.run(
        [sys.executable, "-S", "-c", script],
        cwd=installed.cwd,
        env=installed.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    files = result.stdout.split()
    assert len(files) == 3 and all(f.startswith(str(installed.site)) for f in files), files


def _commands() -> list[str]:
    from gpudiag.cli import build_parser

    (commands,) = [a for a in build_parser()._actions if a.dest == "command"]
    return sorted(commands.choices)


def test_each_subcommand_of_the_installed_wheel_has_help(installed: Installed) -> None:
    """`gpudiag COMMAND --help` for every command, through the installed console script's
    entry point (one interpreter for all: each --help is argparse's, in the same process)."""
    commands = _commands()
    assert {"check", "demo", "view", "run", "health", "fleet"} <= set(commands)
    script = (
        "import contextlib, io, sys\n"
        "from gpudiag.entry import main\n"
        "for args in [['--help']] + [[c, '--help'] for c in sys.argv[1:]]:\n"
        "    out = io.StringIO()\n"
        "    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):\n"
        "        sys.argv = ['gpudiag', *args]\n"
        "        main()\n"
        "    print(repr(out.getvalue()))\n"
    )
    result = subprocess.run(
        [sys.executable, "-S", "-c", script, *commands],
        cwd=installed.cwd,
        env=installed.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0 and not result.stderr, result.stderr
    helps = [eval(line) for line in result.stdout.splitlines()]  # noqa: S307 (our repr())
    assert helps[0].startswith("usage: gpudiag [-h]")
    for command, text in zip(commands, helps[1:], strict=True):
        assert text.startswith(f"usage: gpudiag {command}"), text


@pytest.fixture(scope="module")
def fleet(installed: Installed, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo nodes' snapshots (healthy.toml, faulty.toml), as the installed --export
    writes them from the bundled captures."""
    fleet = tmp_path_factory.mktemp("fleet")
    for name in ("healthy", "faulty"):
        capture = installed.demo(f"demo-hgx-h100-{name}.capture.json")
        export = installed.run("--replay", capture, "--export", str(fleet / f"{name}.toml"))
        assert export.returncode == (0 if name == "healthy" else 2), export.stderr
        assert f"wrote {fleet / name}.toml" in export.stdout, export.stdout
    # Both captures are of one host, so the fleet sees one node with two runs, and its
    # latest run is the one judged. Exported in the same second, the two runs would tie:
    # the healthy run is made the older one, so that the faulty run is the latest.
    healthy = fleet / "healthy.toml"
    text = healthy.read_text()
    created = re.search(r'^created = "([^"]+)"$', text, re.M)
    assert created, text[:300]
    healthy.write_text(text.replace(created.group(0), 'created = "2020-01-01T00:00:00Z"', 1))
    return fleet


def test_each_subcommand_of_the_installed_wheel_runs_on_the_demo_files(
    installed: Installed, fleet: Path, tmp_path: Path
) -> None:
    """One real invocation of each command, as a user types it (about 13 s: each is a
    fresh interpreter, the console script's start included)."""
    snapshot = str(fleet / "faulty.toml")
    capture = installed.demo("demo-hgx-h100-faulty.capture.json")
    replay = installed.demo("demo-hgx-h100-faulty.toml")
    runs = {
        # (arguments): (exit code, what its output holds)
        ("check", snapshot): (2, "CRITICAL"),
        ("diff", str(fleet / "healthy.toml"), snapshot, "--format", "text"): (2, "GPU 7"),
        ("run", "stream", "--size", "65536", "--trials", "2"): (0, "stream"),
        ("rules", "list"): (0, "NVML001"),
        ("rules", "explain", "NVML001"): (0, "How to fix"),
        ("rules", "lint", str(installed.site / "gpudiag" / "rules" / "node.toml")): (0, "ok"),
        ("rules", "profiles"): (0, "h100"),
        ("watch", "--demo", "faulty", "--count", "1", "--format", "csv"): (0, "LOST"),
        ("--replay", capture, "capture", str(tmp_path / "again.json")): (0, "again.json"),
        ("--replay", capture, "health"): (2, "CRITICAL"),
        ("--nvml-replay", replay, "monitor", "--count", "1"): (0, "GPU 7: LOST"),
        ("fleet", str(fleet), "--format", "text"): (1, "GPU 4: 13.28 GB/s"),
        ("baseline", str(fleet), "-o", str(tmp_path / "site.toml")): (0, "site.toml"),
        ("goodput", "--rate", "6.5", "--gpus", "1024", "--format", "json"): (0, "mttf_hours"),
    }
    wrong = []
    for args, (code, expected) in runs.items():
        result = installed.run(*args)
        output = result.stdout + result.stderr
        if result.returncode != code or expected not in output:
            wrong.append(f"{shlex.join(args)}: exit {result.returncode}\n{output[-2000:]}")
    assert not wrong, "\n".join(wrong)
    commands = set(_commands())
    ran = {word for args in runs for word in args if word in commands}
    # import: the next test; demo and view: the TUI's test
    assert ran | {"import", "demo", "view"} == commands, "a command that no test here runs"


def test_import_from_the_installed_wheel(installed: Installed, tmp_path: Path) -> None:
    xml = realdata_dir() / "nvidia-smi-xml" / "telegraf__a10g.xml"
    result = installed.run("import", str(xml), "-o", str(tmp_path / "a10g.toml"))
    assert "wrote" in result.stdout and result.returncode in (0, 1, 2), result.stderr
    check = installed.run("check", str(tmp_path / "a10g.toml"))
    assert "A10G" in Path(tmp_path / "a10g.toml").read_text() and check.returncode < 3


def _tui_in_tmux(installed: Installed, args: list[str], session: str) -> None:
    """Start the installed gpudiag's TUI in a tmux pane at 80x24."""
    command = shlex.join(["env", f"PYTHONPATH={installed.env['PYTHONPATH']}",
                          *installed.command, *args])  # fmt: skip
    start_session(session, f"cd {shlex.quote(str(installed.cwd))} && {command};"
                  " echo EXIT=$?; sleep 30")  # fmt: skip


def _quit(session: str) -> str:
    tmux("send-keys", "-t", session, "q")
    return wait_for(session, "EXIT=", timeout=15)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_installed_wheel_tui_in_a_terminal(installed: Installed, fleet: Path) -> None:
    """The TUI of the installed wheel on its bundled capture: the first screen, every
    screen by its key, the keys screen, and q; then `demo faulty` and `view`. About 15 s:
    three starts of the TUI, which the README's first line and both demo commands open."""
    session = f"gpudiag-wheel-{os.getpid()}"
    capture = installed.demo("demo-hgx-h100-faulty.capture.json")
    try:
        _tui_in_tmux(installed, ["--replay", capture], session)
        wait_for(session, "Fix first", timeout=60)
        # the header's verdict may come a moment after the first screen (a loaded machine)
        pane = wait_for(session, "health: CRITICAL", timeout=60)
        assert "health: CRITICAL" in pane and "8 x NVIDIA H100 80GB HBM3" in pane, pane
        walk_screens(session, FAULTY_DEMO_SCREENS)
        assert "EXIT=0" in _quit(session)
        for args in (["demo", "faulty"], ["view", str(fleet / "faulty.toml")]):
            _tui_in_tmux(installed, args, session)
            wait_for(session, "Fix first", timeout=60)
            pane = wait_for(session, "health: CRITICAL", timeout=60)
            assert "health: CRITICAL" in pane, pane
            assert "EXIT=0" in _quit(session), args
    finally:
        tmux("kill-session", "-t", session)


def test_the_dev_extra_is_the_test_extra_without_cupy() -> None:
    """The test extra (what .ci/run installs) checks the device fake against the real CuPy;
    the dev extra has the same tools without CuPy's 137 MB, and docs/development.md says which."""
    from gpudiag.tomlcompat import tomllib

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert sorted(extras["test"]) == ["cupy-cuda12x>=14,<15", "gpudiag[dev]"]
    assert not [r for r in extras["dev"] if "cupy" in r] and "pytest>=8" in extras["dev"]
    assert ".[test]" in (REPO / ".ci" / "run").read_text()
    docs = (REPO / "docs" / "development.md").read_text()
    assert "pip install -e '.[dev]'" in docs and "`cupy-cuda12x`" in docs
