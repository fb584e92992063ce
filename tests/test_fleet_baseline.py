"""gpudiag baseline: a site rules file from a known-good fleet made from the demo; a node
like the fleet gets no new finding, a node with one GPU capped at 500 W of 700 W does;
and the rule language's gpu_models condition it relies on."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudiag import tomlcompat
from gpudiag.model import Reading
from gpudiag.rule_operators import RuleError
from gpudiag.ruleengine import evaluate
from gpudiag.rulefile import parse_rules
from gpudiag.snapshot import save

from conftest import run_cli
from fleetgen import base_snapshot, clean_dir, fleet_dir, make_node, power_cap

__all__ = ["clean_dir", "fleet_dir"]  # the shared fixtures


@pytest.fixture(scope="module")
def site(clean_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("site")
    result = run_cli("baseline", str(clean_dir), "-o", str(directory / "baseline.toml"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"wrote {directory / 'baseline.toml'}: ")
    first, *groups = result.stdout.splitlines()
    assert first.endswith("rules from 12 nodes") and len(groups) == 1
    assert groups[0].startswith("  0x2330 x8, bare metal: 12 nodes (node[")
    return directory


def _findings(snapshot: Path, *rules: str) -> set[str]:
    args = [a for d in rules for a in ("--rules", d)]
    result = run_cli("check", *args, str(snapshot))
    assert result.returncode in (0, 1, 2, 3) and not result.stderr, result.stderr
    return set(result.stdout.splitlines()[1:])


def test_the_baseline_lints_and_states_its_sources(site: Path) -> None:
    path = site / "baseline.toml"
    lint = run_cli("rules", "lint", str(path))
    assert lint.returncode == 0 and ": ok (" in lint.stdout
    rules = {r["reading"]: r for r in tomlcompat.loads(path.read_text())["rule"]}
    power = rules["gpu.{gpu}.power.limit"]
    assert power["expect"] == {"equal": 700.0} and power["gpu_models"] == ["0x2330"]
    assert power["applies_to"] == "gpu" and "All 12 nodes" in power["why"]
    assert rules["nvml.driver_version"]["expect"] == {"equal": "590.48.01"}
    assert rules["cpu.freq.governor"]["expect"] == {"equal": "performance"}
    triad = rules["gpu.{gpu}.kernel.stream.triad.fp64"]
    assert 2800 < triad["expect"]["min"] < 3000
    assert "The 0.01 quantile of 96 figures from 12 nodes" in triad["why"]
    assert "the bound is 95% of it" in triad["why"]
    assert "gpu.{gpu}.temperature.gpu" not in rules  # volatile: no expected value
    assert "gpu.{gpu}.serial" not in rules and "host.hostname" not in rules


def test_a_node_like_the_fleet_gets_no_new_finding(site: Path, tmp_path: Path) -> None:
    like = tmp_path / "node099.json"
    save(make_node(base_snapshot(), "node099", 99), like)
    assert _findings(like, str(site)) == _findings(like)


def test_a_node_with_one_gpu_capped_does(site: Path, tmp_path: Path) -> None:
    capped = tmp_path / "node098.toml"
    save(make_node(base_snapshot(), "node098", 98, (power_cap(2, 500.0),)), capped)
    new = _findings(capped, str(site)) - _findings(capped)
    assert any("GPU 2: gpu.2.power.limit is 500.0 W, expected equal 700" in line for line in new), (
        new
    )
    assert any("GPU 2: gpu.2.kernel.stream.triad.fp64 is" in line for line in new), new
    assert all(line.startswith("WARNING  BASE") and "GPU 2" in line for line in new), new


def test_bad_targets_and_inputs(clean_dir: Path, tmp_path: Path) -> None:
    result = run_cli("baseline", str(clean_dir), "-o", str(tmp_path))
    assert result.returncode == 3 and "not a regular file" in result.stderr
    result = run_cli("baseline", str(clean_dir), "-o", str(tmp_path / "rules.txt"))
    assert result.returncode == 3 and "must end in .toml" in result.stderr
    (tmp_path / "empty.json").write_text("")
    result = run_cli("baseline", str(tmp_path / "empty.json"), "-o", str(tmp_path / "x.toml"))
    assert result.returncode == 3 and "no snapshot could be read" in result.stderr
    assert "empty.json: file is empty" in result.stderr and not (tmp_path / "x.toml").exists()


RULE = """
[[rule]]
id = "SITE001"
severity = "warning"
title = "power limit"
applies_to = "gpu"
reading = "gpu.{gpu}.power.limit"
expect = { equal = 700.0 }
gpu_models = %s
why = "w"
fix = "f"
"""


def test_gpu_models_limits_a_rule_to_nodes_of_that_model() -> None:
    rules = parse_rules(RULE % '["0x2330"]', "site.toml")
    readings = {
        "gpu.0.pci.device_id": Reading("gpu.0.pci.device_id", "0x2330"),
        "gpu.0.power.limit": Reading("gpu.0.power.limit", 500.0, "W"),
    }

    def fired(device_ids: list[str]) -> list[str]:  # PROF001 (no profile passed) aside
        found = evaluate(rules, readings, device_ids=device_ids)
        return [f.rule_id for f in found if f.rule_id != "PROF001"]

    assert fired(["0x2330"]) == ["SITE001"]
    assert fired(["0x2331"]) == []
    assert fired([]) == []  # no GPU model known: a model's rule does not apply
    for bad in ('"0x2330"', '["H100"]', "[2330]"):
        with pytest.raises(RuleError, match="gpu_models are PCI device ids"):
            parse_rules(RULE % bad, "site.toml")
