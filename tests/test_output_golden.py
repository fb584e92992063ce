"""Every output format's text, byte for byte, for one fixed snapshot: a change to any of
them shows here as a diff of its golden file (as ruff's message formats keep a snapshot
test beside each).

The snapshot (tests/golden/snapshot.toml) is the faulty demo node's export
(`gpudiag --root tests/fixtures/host-basic --nvml-replay snapshots/demo-hgx-h100-faulty.toml
--export`) cut down to its host identity, GPU 1 (reset, warnings, not-applicable checks) and
the lost GPU 7, with its findings for them and a few of the node's (unknown, info,
not-applicable), two kernel results (one ok with statistics, one skipped), and its time,
durations and command line fixed. The golden files beside it (tests/golden/rendered.FORMAT)
are what `render` writes for it, JUnit with the shipped rules.

When a format's output is meant to change, regenerate the goldens and read their diff:

    GPUDIAG_UPDATE_GOLDEN=1 .venv/bin/python -m pytest -q tests/test_output_golden.py
    git diff tests/golden/

A new format in FORMATS fails here until its golden is written the same way.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpudiag.output import FORMATS, render
from gpudiag.rulefile import load_rules
from gpudiag.snapshot import load

from conftest import REPO

GOLDEN = REPO / "tests" / "golden"
UPDATE = os.environ.get("GPUDIAG_UPDATE_GOLDEN") == "1"


def golden_path(fmt: str) -> Path:
    return GOLDEN / f"rendered.{fmt}"


@pytest.mark.parametrize("fmt", FORMATS)
def test_format_matches_its_golden_file_byte_for_byte(fmt: str) -> None:
    snapshot = load(GOLDEN / "snapshot.toml")
    text = render(snapshot, fmt, load_rules())
    path = golden_path(fmt)
    if UPDATE:
        path.write_bytes(text.encode("utf-8"))
    assert path.is_file(), f"no golden for {fmt}: write it with GPUDIAG_UPDATE_GOLDEN=1"
    expected = path.read_bytes().decode("utf-8")
    assert text == expected, f"{fmt} output differs from {path.name} (see the docstring)"

