"""The repository's promises: README commands that CI runs, links that resolve, ruff-clean code."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from conftest import REPO


def test_readme_opens_with_the_two_commands_ci_runs() -> None:
    lines = (REPO / "README.md").read_text().splitlines()
    install_and_run, install_and_test = (line.strip() for line in lines[2:4])
    assert install_and_run.endswith(".venv/bin/gpudiag")
    assert install_and_test.endswith(".venv/bin/pytest")
    assert install_and_test in (REPO / ".ci" / "run").read_text().splitlines()


_FENCE = re.compile(r"^(    |\t)")
_CODE_SPAN = re.compile(r"`[^`]*`")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _anchor(heading: str) -> str:
    """The anchor GitHub and mkdocs' toc give a heading: lower case, punctuation dropped."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _prose(path: Path) -> list[str]:
    """The lines of a Markdown file outside indented code blocks, code spans removed."""
    return [
        _CODE_SPAN.sub("", line) for line in path.read_text().splitlines() if not _FENCE.match(line)
    ]


def test_every_relative_link_in_the_readme_and_docs_resolves() -> None:
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    anchors = {
        page.resolve(): {_anchor(line.lstrip("#")) for line in _prose(page) if line.startswith("#")}
        for page in pages
    }
    broken = []
    for page in pages:
        for line in _prose(page):
            for target in _LINK.findall(line):
                if re.match(r"[a-z]+:", target):
                    continue
                name, _, anchor = target.partition("#")
                file = (page.parent / name).resolve() if name else page.resolve()
                if not file.exists() or (anchor and anchor not in anchors.get(file, set())):
                    broken.append(f"{page.relative_to(REPO)}: {target}")
    assert not broken, broken
    linked = {
        t.partition("#")[0] for line in _prose(REPO / "README.md") for t in _LINK.findall(line)
    }
    assert {f"docs/{p.name}" for p in pages[1:]} <= linked, "a docs page the README does not link"
    mkdocs = (REPO / "mkdocs.yml").read_text()
    assert all(f": {p.name}" in mkdocs for p in pages[1:]), "a docs page mkdocs.yml leaves out"


def test_ruff_is_clean() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", str(REPO)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
