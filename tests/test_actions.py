"""Recommended actions: declared per rule, defaulted by severity, carried into snapshots."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpudiag.model import Action, Finding, Reading, Severity
from gpudiag.rule_operators import RuleError
from gpudiag.ruleengine import evaluate
from gpudiag.rulefile import load_rules, parse_rule_file, parse_rules
from gpudiag.snapshot import dumps, loads, snapshot_from_dict, snapshot_to_dict

from conftest import REPO, run_cli

FAULTY = str(REPO / "snapshots" / "demo-hgx-h100-faulty.toml")
TREE = str(REPO / "tests" / "fixtures" / "host-basic")

RULE = """
[[rule]]
id = "TST001"
severity = "{severity}"
title = "t"
applies_to = "node"
reading = "x.value"
expect = {{ max = 0 }}
why = "w"
fix = "f"
{action}
"""


def _fire(severity: str, action: str = "") -> Finding:
    rules = parse_rules(RULE.format(severity=severity, action=action), "t.toml")
    (finding,) = evaluate(rules, {"x.value": Reading("x.value", 1)})
    return finding


@pytest.mark.parametrize(
    ("severity", "expected"),
    [("critical", Action.DRAIN), ("warning", Action.MONITOR), ("info", Action.NONE)],
)
def test_default_action_by_severity(severity: str, expected: Action) -> None:
    assert _fire(severity).action is expected


def test_declared_action_wins_and_warnings_never_drain() -> None:
    assert _fire("critical", 'action = "reset"').action is Action.RESET
    assert _fire("warning", 'action = "none"').action is Action.NONE
    with pytest.raises(RuleError, match="only a critical rule may recommend drain"):
        parse_rules(RULE.format(severity="warning", action='action = "drain"'), "t.toml")
    with pytest.raises(RuleError, match="action must be one of none, monitor, reset"):
        parse_rules(RULE.format(severity="critical", action='action = "rma"'), "t.toml")
    # an override that lowers a service rule to a warning: monitor, not service
    rules, _ = parse_rule_file(RULE.format(severity="critical", action='action = "service"'), "t")
    lowered = replace(rules[0], severity=Severity.WARNING)
    (finding,) = evaluate([lowered], {"x.value": Reading("x.value", 1)})
    assert finding.action is Action.MONITOR


def test_unknown_evidence_recommends_nothing() -> None:
    rules = parse_rules(RULE.format(severity="critical", action='action = "service"'), "t.toml")
    (finding,) = evaluate(rules, {})
    assert finding.severity is Severity.UNKNOWN
    assert finding.action is Action.NONE


def test_shipped_rules_declare_the_actions_that_matter() -> None:
    rules = {r.id: r for r in load_rules()}
    assert rules["GPU011"].action is Action.RESET  # uncorrectable ECC, row remap pending
    assert rules["GPU007"].action is Action.RESET
    assert rules["GPU001"].action is Action.SERVICE  # fallen off the bus: drain and RMA
    assert rules["GPU004"].action is Action.NONE  # persistence off: fix the setting
    assert rules["NVL001"].action is None  # a warning left to its default: monitor


def test_site_override_changes_an_action(tmp_path) -> None:
    (tmp_path / "site.toml").write_text('[[override]]\nid = "NVL008"\naction = "reboot"\n')
    rules = {r.id: r for r in load_rules([tmp_path])}
    assert rules["NVL008"].action is Action.REBOOT


def test_faulty_demo_findings_carry_actions_into_the_snapshot(tmp_path) -> None:
    target = tmp_path / "node.json"
    export = run_cli("--root", TREE, "--nvml-replay", FAULTY, "--export", str(target))
    assert export.returncode == 2, export.stderr
    snapshot = loads(target.read_text())
    actions = {(f.rule_id, f.subject): f.action for f in snapshot.findings}
    assert actions[("GPU001", "GPU 7")] is Action.SERVICE
    assert actions[("GPU011", "GPU 1")] is Action.RESET
    assert actions[("GPU004", "GPU 5")] is Action.NONE
    assert actions[("PCIE001", "GPU 3")] is Action.MONITOR
    assert actions[("CPU001", "node")] is Action.NONE  # unknown: cannot check
    # TOML round trip keeps them; a file written before actions existed loads as none
    assert loads(dumps(snapshot)) == snapshot
    data = snapshot_to_dict(snapshot)
    for finding in data["findings"]:
        del finding["action"]
    assert {f.action for f in snapshot_from_dict(data).findings} == {Action.NONE}
