"""The commands' text fits an 80-column terminal (the brief: over SSH at 80x24): lines
wrap at $COLUMNS (or the terminal's width) under a hanging indent; in a pipe without
$COLUMNS they stay whole (gpudiag/termtext.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudiag import cli
from gpudiag.rulefile import load_rules
from gpudiag.snapshot import save

from conftest import realdata_dir
from fleetgen import base_snapshot, make_node


def _lines(capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    """The lines `gpudiag ARGV` prints, stdout and stderr (in-process)."""
    assert cli.main(list(argv)) in (0, 1, 2), capsys.readouterr().err
    out = capsys.readouterr()
    return (out.out + out.err).splitlines()


def test_check_rules_import_and_diff_fit_80_columns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """At COLUMNS=80, on the faulty demo and real nvidia-smi outputs: `check` (its
    summary, a finding's long message, the rules that did not apply), `rules explain`
    of every rule, `rules profiles` (the bands' sources) and one profile's figures,
    `import`'s summary, `diff` (its verdict, which file is A and B, its body), `rules
    list` and `baseline`'s summary. Each printed 80 columns or more before."""
    nvsmi = realdata_dir() / "nvidia-smi-q"
    bad = nvsmi / "azurehpc__bad_nvsmi8_output__EDITED_fault_injected.txt"
    good = nvsmi / "azurehpc__orig_nvsmi8_output__q-d-PAGE_RETIREMENT_8gpu_535.86.10.txt"
    demo, imported_bad, imported_good = (tmp_path / f"{n}.toml" for n in ("demo", "b", "g"))
    monkeypatch.setenv("COLUMNS", "80")
    printed = {
        "demo --export": _lines(capsys, "--export", str(demo), "demo", "faulty"),
        "import": _lines(capsys, "import", str(bad), "-o", str(imported_bad)),
        "check demo": _lines(capsys, "check", str(demo)),
        "check import": _lines(capsys, "check", str(imported_bad)),
        "rules profiles": _lines(capsys, "rules", "profiles"),
        "rules profiles h100-sxm5": _lines(capsys, "rules", "profiles", "h100-sxm5"),
    }
    for rule in load_rules():
        printed[f"rules explain {rule.id}"] = _lines(capsys, "rules", "explain", rule.id)
    _lines(capsys, "import", str(good), "-o", str(imported_good))
    # the review (#12): diff's body, `rules list` and a baseline's summary passed 80 too
    printed["diff"] = _lines(capsys, "diff", "--all", str(imported_good), str(imported_bad))
    healthy = tmp_path / "healthy.toml"
    _lines(capsys, "--export", str(healthy), "demo", "healthy")
    printed["diff demo"] = _lines(capsys, "diff", "--all", str(healthy), str(demo))
    printed["rules list"] = _lines(capsys, "rules", "list")
    fleet = tmp_path / "fleet"
    fleet.mkdir()
    for seed in (1, 2):
        save(make_node(base_snapshot(), f"node{seed:03d}", seed), fleet / f"node{seed:03d}.toml")
    printed["baseline"] = _lines(capsys, "baseline", str(fleet), "-o", str(fleet / "site.toml"))
    assert any(line.startswith("CRITICAL GPU001") for line in printed["check demo"])
    assert any(line.startswith("  CRITICAL GPU001 GPU 7") for line in printed["diff demo"])
    assert len(printed["rules list"]) > len(load_rules())  # long titles wrapped
    url = "https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/dcgm-diagnostics.html"
    assert url in printed["rules explain DCGM001"]  # whole on its line (79 columns), not cut
    # a URL wider than the width is never cut (#12: .../foundations/STR | EAM/index.html):
    # whole on a line of its own, the one kind of line that may pass the width
    url = "https://nvidia.github.io/grace-cpu-benchmarking-guide/foundations/STREAM/index.html"
    assert url in printed["rules explain KRN026"]
    wide = {
        (what, line)
        for what, lines in printed.items()
        for line in lines
        if len(line) > 80 and " " in line.strip()
    }
    assert not wide, sorted(wide)[:5]
    # in a pipe without COLUMNS a finding stays on its line (grep finds it whole)
    monkeypatch.delenv("COLUMNS")
    whole = _lines(capsys, "check", str(demo))
    assert any(line.startswith("CRITICAL GPU001") and len(line) > 80 for line in whole)
