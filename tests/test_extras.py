"""A node's install (`pip install gpudiag`) without the extras: what needs one says in one
line which to install (exit 3), and what a node runs needs none of them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpudiag import extras
from gpudiag.cli import main
from gpudiag.tomlcompat import tomllib

from conftest import REPO

# A process in which the extras' modules cannot be imported (as in a node's install),
# then ARGV run as the command line: the node's commands must work there.
WITHOUT_EXTRAS = """
import sys
from importlib.abc import MetaPathFinder
BLOCKED = set(sys.argv[1].split(","))
class Blocked(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Blocked())
from gpudiag.cli import main
import gpudiag.tui, gpudiag.diff, gpudiag.health  # the TUI, diff and health load
sys.exit(main(sys.argv[2:]))
"""


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def _name(requirement: str) -> str:
    return requirement.split(";")[0].split(">")[0].split("=")[0].split("[")[0].strip().lower()


def test_each_extra_installs_its_modules_and_a_node_none_of_them() -> None:
    project = _pyproject()
    extra_of = project["optional-dependencies"]
    base = {_name(r) for r in project["dependencies"]}
    distribution = {"prometheus_client": "prometheus-client", "ClusterShell": "clustershell"}
    for module, extra in extras.EXTRAS.items():
        name = distribution.get(module, module).lower()
        assert name in {_name(r) for r in extra_of[extra]}, (module, extra)
        assert name not in base, module
    assert sorted(extra_of["all"]) == ["gpudiag[fleet,cpu-kernels,monitor]"]
    assert "gpudiag[all]" in extra_of["dev"]  # the suite runs everything


@pytest.mark.parametrize(
    ("argv", "module", "extra"),
    [
        (["fleet", "DIR"], "msgspec", "fleet"),
        (["fleet", "DIR"], "ClusterShell", "fleet"),
        (["fleet", "DIR", "--parquet", "OUT/f.parquet"], "polars", "fleet"),
        (["fleet", "DIR/f.parquet"], "polars", "fleet"),
        (["baseline", "DIR", "-o", "OUT/site.toml"], "msgspec", "fleet"),
        (["monitor", "--textfile", "OUT/g.prom", "--count", "1"], "prometheus_client", "monitor"),
        (["monitor", "--history", "OUT", "--count", "1"], "polars", "fleet"),
        (["goodput", "DIR"], "msgspec", "fleet"),  # snapshots over time: the fleet's reader
    ],
)
def test_a_command_without_its_extra_says_which_to_install(
    argv: list[str], module: str, extra: str, tmp_path: Path, monkeypatch, capsys
) -> None:
    real = extras._found
    monkeypatch.setattr(extras, "_found", lambda name: name != module and real(name))
    args = [a.replace("DIR", str(tmp_path)).replace("OUT", str(tmp_path)) for a in argv]
    assert main(args) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"needs {module}, not installed" in err
    assert f"pip install 'gpudiag[{extra}]'" in err


def test_the_node_commands_run_without_any_extra(tmp_path: Path) -> None:
    """The demo's snapshot, headless (what .ci/run checks in the offline install), and
    the TUI, diff and health modules, in a process that cannot import any extra."""
    blocked = ",".join([*extras.EXTRAS, "llvmlite"])
    command = [sys.executable, "-c", WITHOUT_EXTRAS, blocked, "--export", "-", "--format", "json"]
    command += ["demo", "healthy"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["host"] == "hgx-h100-demo"
    assert "0 critical, 0 warning" in result.stderr


def test_goodput_from_a_given_rate_needs_no_extra() -> None:
    """`gpudiag goodput --rate R` is the model alone: no fleet to read, no extra (it
    stopped with an internal error, msgspec, on a node's install)."""
    blocked = ",".join([*extras.EXTRAS, "llvmlite"])
    command = [sys.executable, "-c", WITHOUT_EXTRAS, blocked, "goodput", "--rate", "6.5"]
    command += ["--gpus", "16384", "--format", "json"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert round(json.loads(result.stdout)["mttf_hours"], 2) == 1.80


def test_the_demo_exports_headless_and_its_exit_code_is_the_findings(capsys) -> None:
    assert main(["--export", "-", "--format", "json", "demo", "faulty"]) == 2
    out = capsys.readouterr()
    assert json.loads(out.out)["command_line"][-1] == "faulty"
    assert "3 critical" in out.err
    assert main(["--format", "json", "demo"]) == 3  # --format goes with --export


def test_the_offline_recipe_is_what_ci_runs() -> None:
    """docs/development.md's offline recipe installs from the wheelhouse with the network
    refused, and .ci/run runs its lines, between the markers, verbatim."""
    text = (REPO / "docs" / "development.md").read_text()
    recipe = text.split("<!-- offline-recipe -->\n")[1].split("<!-- /offline-recipe -->")[0]
    assert "pip wheel --wheel-dir gpudiag-wheelhouse ." in recipe
    assert "pip install --no-index --find-links gpudiag-wheelhouse gpudiag" in recipe
    assert "gpudiag --export - demo healthy" in recipe
    run = (REPO / ".ci" / "run").read_text()
    assert "/^<!-- offline-recipe -->$/" in run and "\noffline_recipe_installs ||" in run
