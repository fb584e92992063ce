"""The repository's promises: README commands that CI runs, and ruff-clean code."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO


def test_readme_opens_with_the_two_commands_ci_runs() -> None:
    lines = (REPO / "README.md").read_text().splitlines()
    install_and_run, install_and_test = (line.strip() for line in lines[2:4])
    assert install_and_run.endswith(".venv/bin/gpudiag")
    assert install_and_test.endswith(".venv/bin/pytest")
    assert install_and_test in (REPO / ".ci" / "run").read_text().splitlines()


def test_ruff_is_clean() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", str(REPO)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
