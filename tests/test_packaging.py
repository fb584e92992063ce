"""The wheel: probes, kernels and rules ship inside the gpudiag package, nothing else."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import FIXTURES, REPO


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "-w",
            str(out),
            str(REPO),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    # setuptools and wheel come with the test extra: a failed build is a failure, never a skip
    assert build.returncode == 0, build.stderr
    (path,) = out.glob("gpudiag-*.whl")
    return path


def test_wheel_holds_subpackages_and_rule_files(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    for expected in (
        "gpudiag/cli.py",
        "gpudiag/probes/__init__.py",
        "gpudiag/probes/host.py",
        "gpudiag/kernels/stats.py",
        "gpudiag/kernels/stream.cu",
        "gpudiag/rules/profiles.toml",
        "gpudiag/rules/explanations.toml",
        "gpudiag/rules/node.toml",
        "gpudiag/snapshots/demo-hgx-h100-healthy.toml",  # gpudiag demo, for a pip user too
        "gpudiag/snapshots/demo-hgx-h100-faulty.toml",
        "gpudiag/snapshots/demo-hgx-h100-healthy.capture.json",  # the whole node it opens
        "gpudiag/snapshots/demo-hgx-h100-faulty.capture.json",
    ):
        assert expected in names
    top_level = {name.split("/")[0] for name in names}
    assert {t for t in top_level if not t.endswith(".dist-info")} == {"gpudiag"}
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "gpudiag = gpudiag.entry:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_installed_wheel_runs_outside_the_checkout(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        timeout=300,
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import gpudiag, gpudiag.probes, gpudiag.rules; print(gpudiag.__file__);"
            "from gpudiag.cli import main; raise SystemExit(main())",
            "--root",
            str(FIXTURES / "host-basic"),
            "--nvml-replay",
            str(FIXTURES / "replay-no-driver.toml"),
            "--export",
            "-",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.stdout.splitlines()[0].startswith(str(target))
    assert result.returncode == 2, result.stderr
    assert "CRITICAL NVML001" in result.stderr
    demo = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpudiag",
            "watch",
            "--demo",
            "faulty",
            "--count",
            "1",
            "--format",
            "csv",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert demo.returncode == 0, demo.stderr
    lines = demo.stdout.splitlines()  # a header, then GPUs 0-7 of the faulty demo node
    assert len(lines) == 9 and lines[8].split(",")[1:4] == ["7", "LOST", "LOST"]
