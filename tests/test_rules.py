"""The rules engine and the shipped rules: each fires on bad readings, stays quiet on good."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudiag.model import ProbeResult, ProbeStatus, Reading, ReadingStatus, Severity
from gpudiag.profiles import load_profiles
from gpudiag.rule_operators import RuleError
from gpudiag.ruleengine import evaluate
from gpudiag.rulefile import load_rules, parse_rules

from rule_cases import CASES

RULE = """
[[rule]]
id = "TEST001"
severity = "warning"
title = "t"
applies_to = "{applies_to}"
reading = "{reading}"
expect = {expect}
why = "w"
fix = "f"
{extra}
"""


def _rule(applies_to="node", reading="x.y", expect="{ min = 1 }", extra="") -> str:
    return RULE.format(applies_to=applies_to, reading=reading, expect=expect, extra=extra)


def _by_key(*readings: Reading) -> dict[str, Reading]:
    return {r.key: r for r in readings}


def _ids(findings) -> list[tuple[str, Severity, str]]:
    return [(f.rule_id, f.severity, f.subject) for f in findings]


SHIPPED = CASES
PROFILE = load_profiles()["h100-sxm5"]


def test_every_shipped_rule_has_cases() -> None:
    assert sorted(r.id for r in load_rules()) == sorted(SHIPPED)


@pytest.mark.parametrize("rule_id", sorted(SHIPPED))
def test_shipped_rule_fires(rule_id: str) -> None:
    rules = [r for r in load_rules() if r.id == rule_id]
    firing, _ = SHIPPED[rule_id]
    findings = evaluate(rules, _by_key(*firing), profile=PROFILE)
    assert [(f.rule_id, f.severity) for f in findings] == [(rule_id, rules[0].severity)]
    assert firing[0] in findings[0].evidence, findings[0].evidence
    assert {r.key for r in findings[0].evidence} <= {r.key for r in firing}
    assert findings[0].why and findings[0].fix
    assert "{" not in findings[0].message, findings[0].message  # every field was filled


@pytest.mark.parametrize("rule_id", sorted(SHIPPED))
def test_shipped_rule_stays_quiet(rule_id: str) -> None:
    rules = [r for r in load_rules() if r.id == rule_id]
    _, quiet = SHIPPED[rule_id]
    assert evaluate(rules, _by_key(*quiet), profile=PROFILE) == []


def test_missing_evidence_is_unknown_never_a_pass() -> None:
    rules = parse_rules(_rule(), "t.toml")
    absent = evaluate(rules, {})
    assert _ids(absent) == [("TEST001", Severity.UNKNOWN, "node")]
    assert absent[0].message == "cannot check: x.y is missing (no probe produced it)"
    failed = evaluate(rules, _by_key(Reading.failed("x.y", ReadingStatus.NEEDS_ROOT, "root only")))
    assert failed[0].severity is Severity.UNKNOWN and "needs-root (root only)" in failed[0].message


def test_wrong_typed_reading_is_unknown() -> None:
    findings = evaluate(parse_rules(_rule(), "t.toml"), _by_key(Reading("x.y", "sixteen")))
    assert findings[0].severity is Severity.UNKNOWN and "not a number" in findings[0].message


@pytest.mark.parametrize(
    ("expect", "value", "fires"),
    [
        ("{ equal = 'on' }", "off", True),
        ("{ equal = 'on' }", "on", False),
        ("{ not_equal = 0 }", 0, True),
        ("{ not_equal = 0 }", 3, False),
        ("{ not_equal = 'off' }", "on", False),
        ("{ in = [1, 2] }", 3, True),
        ("{ in = [1, 2] }", 2, False),
        ("{ not_in = ['powersave'] }", "powersave", True),
        ("{ min = 16 }", 8, True),
        ("{ min = 16 }", 16, False),
        ("{ max = 85.0 }", 90.5, True),
        ("{ max = 85.0 }", 85, False),
    ],
)
def test_operators(expect: str, value: object, fires: bool) -> None:
    findings = evaluate(parse_rules(_rule(expect=expect), "t.toml"), _by_key(Reading("x.y", value)))
    # firing is a warning on the node, never an unknown that cannot judge the value
    assert _ids(findings) == ([("TEST001", Severity.WARNING, "node")] if fires else [])


def test_gpu_rules_expand_over_every_gpu() -> None:
    rules = parse_rules(
        _rule(
            "gpu",
            "gpu.{gpu}.pcie.link_width",
            "{ min = 16 }",
            'message = "link x{value} on GPU {gpu}"',
        ),
        "t.toml",
    )
    readings = _by_key(
        Reading("gpu.0.pcie.link_width", 16),
        Reading("gpu.1.pcie.link_width", 8),
        Reading("gpu.2.name", "H100"),
    )
    findings = evaluate(rules, readings)
    assert _ids(findings) == [
        ("TEST001", Severity.WARNING, "GPU 1"),
        ("TEST001", Severity.UNKNOWN, "GPU 2"),
    ]
    assert findings[0].message == "link x8 on GPU 1"


def test_message_fields_are_plain_text_and_internals_are_refused() -> None:
    rule = _rule(extra='message = "{value} and {value.x}"')
    findings = evaluate(parse_rules(rule, "t.toml"), _by_key(Reading("x.y", 0)))
    assert findings[0].message == "0 and {value.x}"  # not a format string: nothing is looked up
    with pytest.raises(RuleError, match="'__' is not allowed"):
        parse_rules(_rule(extra='message = "{value.__class__.__mro__}"'), "t.toml")


def test_probe_failures_are_findings() -> None:
    probes = [
        ProbeResult("dimms", ProbeStatus.TIMEOUT, 10.0, error="no answer within 10 s"),
        ProbeResult("host", ProbeStatus.OK, 0.01),
    ]
    findings = evaluate([], {}, probes)
    assert _ids(findings) == [("PROBE001", Severity.UNKNOWN, "probe dimms")]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (_rule(extra='expct = "x"'), "t.toml:2: rule TEST001: unknown key(s) expct"),
        (_rule(expect="{ approx = 1 }"), "unknown operator 'approx'"),
        (_rule(expect="{ min = 'x' }"), "'min' takes a number"),
        (_rule(expect="{ min = 1, max = 2 }"), "exactly one operator"),
        (_rule(expect="'__import__(\"os\")'"), "'__' is not allowed in rule files"),
        (_rule(expect="'min'"), "expect must be a table"),
        (
            _rule(extra='message = "{value} of {nonsense}"'),
            "message field {nonsense} is not one of",
        ),
        (_rule(reading="x.__class__"), "'__' is not allowed"),
        (_rule(expect="{ between = [5, 1] }"), "'between' takes [low, high]"),
        (_rule(expect="{ min_profile = 'warp_speed' }"), "takes a profile field"),
        (_rule(expect="{ min = 1 }", extra="factor = 2"), "'factor' goes with"),
        (_rule(expect="{ all_equal = true }"), "all_equal is a node rule over a gpu.{gpu} reading"),
        (_rule(applies_to="cpu"), "applies_to must be one of node, gpu, nvlink"),
        (_rule(applies_to="gpu"), "a gpu rule's reading has {gpu}"),
        (_rule().replace('severity = "warning"', 'severity = "fatal"'), "severity must be"),
        (_rule().replace('id = "TEST001"', 'id = "t1"'), "id must look like PCIE001"),
        (_rule().replace('why = "w"', ""), "missing key 'why'"),
        (_rule().replace('title = "t"', "title = 3"), "'title' must be a string"),
        ("[[rule]\n", "not valid TOML"),
        ("[meta]\nx = 1\n", "unknown top-level key(s) meta"),
    ],
)
def test_rule_file_errors_name_file_and_line(text: str, expected: str) -> None:
    with pytest.raises(RuleError) as error:
        parse_rules(text, "t.toml")
    assert str(error.value).startswith("t.toml")
    assert expected in str(error.value)


def test_second_rule_error_points_at_its_line() -> None:
    text = _rule() + _rule().replace("TEST001", "TEST002").replace("min = 1", "mni = 1")
    with pytest.raises(RuleError, match=r"^t.toml:13: rule TEST002: unknown operator 'mni'"):
        parse_rules(text, "t.toml")


def test_site_rule_directories_and_duplicate_ids(tmp_path: Path) -> None:
    (tmp_path / "site.toml").write_text(_rule().replace("TEST001", "SITE001"))
    assert "SITE001" in {r.id for r in load_rules([tmp_path])}
    (tmp_path / "dup.toml").write_text(_rule().replace("TEST001", "NVML001"))
    with pytest.raises(RuleError, match=r"duplicate id, first defined at rules/node\.toml"):
        load_rules([tmp_path])
    with pytest.raises(RuleError, match="not a directory"):
        load_rules([tmp_path / "absent"])


def test_deprecated_rules_do_not_run() -> None:
    rules = parse_rules(_rule(extra='status = "deprecated"'), "t.toml")
    assert evaluate(rules, {}) == []


def test_info_rule_with_missing_evidence_stays_info() -> None:
    rules = parse_rules(_rule().replace('severity = "warning"', 'severity = "info"'), "t.toml")
    findings = evaluate(rules, {})
    assert _ids(findings) == [("TEST001", Severity.INFO, "node")]
    assert findings[0].message.startswith("cannot check: x.y is missing")


def test_present_fires_on_a_failed_read_but_not_on_an_absent_one() -> None:
    rules = parse_rules(_rule(expect="{ present = true }"), "t.toml")
    failed = evaluate(rules, _by_key(Reading.failed("x.y", ReadingStatus.ERROR, "GpuIsLost")))
    assert _ids(failed) == [("TEST001", Severity.WARNING, "node")]
    absent = evaluate(rules, {})  # an import of a partial file never tried to read it
    assert _ids(absent) == [("TEST001", Severity.UNKNOWN, "node")]


def test_the_fp64_gemm_peak_is_the_tensor_cores_where_a_model_has_them() -> None:
    """KRN007 judges FP64 GEMM against fp64_gemm_tflops, computed per profile: the FP64
    Tensor Core figure where there is one (cuBLAS's DGEMM runs there: 55.7 TFLOP/s on a
    real H100), else the vector figure; a profiles file may not write it."""
    from gpudiag.profiles import parse_profiles

    profiles = load_profiles()
    assert profiles["h100-sxm5"].values["fp64_gemm_tflops"] == 67
    for profile in profiles.values():
        vector = profile.values.get("fp64_tflops")
        tensor = profile.values.get("fp64_tensor_tflops")
        figures = [f for f in (vector, tensor) if f is not None]
        assert profile.values.get("fp64_gemm_tflops") == (max(figures) if figures else None)
    vector_only = parse_profiles(
        '[profile.card]\ndevice_ids = ["0x1234"]\nfp64_tflops = 1.4\n'
        '[profile.child]\ninherits = "card"\ndevice_ids = ["0x1235"]\nfp64_tensor_tflops = 9\n',
        "test",
    )
    assert vector_only["card"].values["fp64_gemm_tflops"] == 1.4
    assert vector_only["child"].values["fp64_gemm_tflops"] == 9
    with pytest.raises(RuleError, match="unknown key"):
        parse_profiles('[profile.x]\ndevice_ids = ["0x1234"]\nfp64_gemm_tflops = 5\n', "test")
    krn007 = next(r for r in load_rules() if r.id == "KRN007")
    assert (krn007.operand, krn007.factor) == ("gemm_fp64_floor_tflops", 1.0)
    # the band floor is a share of the FP64 GEMM peak (the tensor cores' 67 on an H100)
    assert profiles["h100-sxm5"].values["gemm_fp64_floor_tflops"] == 0.5 * 67
