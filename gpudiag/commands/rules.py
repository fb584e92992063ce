"""`gpudiag rules list|explain|lint|profiles`: the rules and the GPU-model profiles."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpudiag import inputs
from gpudiag.commands.common import UsageError

if TYPE_CHECKING:
    from gpudiag.rulefile import Rule


def add_parser(subparsers: Any) -> None:
    """`gpudiag rules` and its actions."""
    rules = subparsers.add_parser("rules")
    rules_commands = rules.add_subparsers(dest="rules_command", metavar="ACTION", required=True)
    for name, line in ACTIONS.items():  # each action's --help opens with its line too
        action = rules_commands.add_parser(
            name, help=line, description=f"{line[0].upper()}{line[1:]}."
        )
        if name == "explain":
            action.add_argument("rule_id", metavar="ID", help="a rule id, such as GPU001")
        elif name == "lint":
            action.add_argument(
                "lint_files", metavar="FILE", nargs="+", type=Path, help="a site rule file (.toml)"
            )
        elif name == "profiles":
            action.add_argument(
                "profile_name",
                metavar="NAME",
                nargs="?",
                help="one profile: each figure and its source",
            )


ACTIONS = {
    "list": "every rule: id, severity, status, scope, title",
    "explain": "what a rule checks, why, how to fix",
    "lint": "check rule files without running them; every error on standard error",
    "profiles": "the GPU-model profiles, their device ids and healthy bands",
}


def run(args: argparse.Namespace) -> int:
    """Run the rules action asked for."""
    if args.rules_command == "lint":
        return _lint(args.lint_files)
    if args.rules_command == "profiles":
        return _profiles(getattr(args, "profile_name", None))
    from gpudiag.rulefile import load_rules

    rules = load_rules(args.rules, site=True)
    if args.rules_command == "list":
        from gpudiag.termtext import output_width, wrap

        width = output_width()  # a long title wraps under the titles' column
        for rule in rules:
            state = "disabled" if rule.disabled else rule.status
            line = (
                f"{rule.id:<8} {rule.severity.value:<8} {state:<10} {rule.applies_to:<11} "
                f"{rule.title}"
            )
            print("\n".join(wrap(line, width, 41)))
        return 0
    rule = next((r for r in rules if r.id == args.rule_id.upper()), None)
    if rule is None:
        raise UsageError(f"no rule {args.rule_id} (gpudiag rules list shows them)")
    from gpudiag.termtext import output_width, wrap_all

    print("\n".join(wrap_all(explain_rule(rule).splitlines(), output_width())))
    return 0


def _profiles(name: str | None) -> int:
    """The profiles, a line each with their healthy bands under it; or one profile's
    every figure with its source."""
    from gpudiag.profiles import load_profiles
    from gpudiag.termtext import output_width, wrap

    width = output_width()  # each line wraps at a terminal's width, whole in a pipe
    profiles = load_profiles()
    if name is not None and name not in profiles:
        raise UsageError(f"no profile {name} (gpudiag rules profiles lists them)")
    for profile in profiles.values() if name is None else (profiles[name],):
        words = [*profile.brands, *profile.name_words]
        classes = f"(brand or name: {', '.join(dict.fromkeys(words))})" if words else ""
        cpu = (
            f"(a CPU: MIDR part {', '.join(profile.cpu_parts)}, "
            f"{' or '.join(map(str, profile.cpu_memory_gb))} GB and "
            f"{' or '.join(map(str, profile.cpu_gpus))} GPU(s) on its NUMA node)"
            if profile.cpu_parts
            else ""
        )
        ids = ", ".join(profile.device_ids) or classes or cpu or "(select with --profile)"
        print("\n".join(wrap(f"{profile.name:<16} {profile.title:<44} {ids}", width, 17)))
        if name is not None:
            for field, value in sorted(profile.values.items()):
                source = profile.source(field)
                line = f"  {field} = {value}" + (f": {source}" if source else "")
                print("\n".join(wrap(line, width, 4)))
            continue
        for key, text in profile.sources:
            if key.startswith("band."):
                print("\n".join(wrap(f"  {key}: {text}", width, 4)))
    return 0


def explain_rule(rule: Rule) -> str:
    """What a rule checks, why it matters, how to fix it, an example: ruff's explain."""
    from gpudiag import catalog, shipped
    from gpudiag.rulefile import action_for

    expectation = f"{rule.operator.replace('_', ' ')} {rule.operand!r}"
    if rule.factor != 1.0:
        expectation += f" x {rule.factor:g}"
    subject = catalog.SUBJECTS[rule.applies_to]
    declared = shipped.find(catalog.sample_key(rule.reading))
    made_by = (
        f"made by {', '.join(sorted(declared.producers))}"
        + (f", in {declared.unit}" if declared.unit not in ("", "*") else "")
        + f", {declared.change.value}"
        + (f": {declared.help}" if declared.help else "")
        if declared
        else "declared by no producer (rules lint refuses it)"
    )
    lines = [
        f"{rule.id} ({rule.severity.value}, {rule.status}): {rule.title}",
        "",
        f"What it checks: {rule.reading}, on {subject.words}: {expectation}.",
        f"The reading: {made_by}.",
        *(
            f"Applies only where: {kind} {name} is {value!r} (elsewhere: not applicable)."
            for kind, name, value in rule.applies_if
        ),
        f"Why it matters: {rule.why}",
        f"How to fix: {rule.fix}",
        f"Recommended action: {action_for(rule.severity, rule.action).value}"
        + ("" if rule.action is not None else " (the default for its severity)"),
    ]
    if rule.example:
        lines.append(f"Example that fires: {rule.example}")
    lines.extend(f"Reference: {ref}" for ref in rule.references)
    lines.append(f"Defined in: {rule.origin.split(': rule')[0]}")
    return "\n".join(lines)


def _lint(paths: Sequence[Path]) -> int:
    """Check each rule file as loading it beside the shipped rules would (the same code
    path, rulefile.lint_rule_file); one line per file."""
    from gpudiag.rule_operators import RuleError
    from gpudiag.rulefile import lint_data_file, lint_rule_file
    from gpudiag.session import EXIT_UNKNOWN

    failed = False
    for path in paths:
        try:
            data = lint_data_file(path)
            if data is not None:
                print(f"{path}: ok (a data file: {data})")
                continue
            rules, overrides, errors = lint_rule_file(path)
        except RuleError as exc:
            errors = [str(exc)]
        if errors:  # every error of every file, on standard error
            for error in errors:
                print(f"gpudiag: {inputs.printable(error)}", file=sys.stderr)
            failed = True
            continue
        if rules == overrides == 0:  # an empty file (or only comments) is no rule file
            print(f"gpudiag: {path}: holds no rules and no overrides", file=sys.stderr)
            failed = True
            continue
        print(f"{path}: ok ({rules} rules, {overrides} overrides)")
    return EXIT_UNKNOWN if failed else 0
