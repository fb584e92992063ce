"""`gpudiag check SNAPSHOT`: the findings of a saved snapshot."""

from __future__ import annotations

import sys

from gpudiag.commands.common import PausedGC, load_snapshot, path_argument, write_prometheus
from gpudiag.output import FORMATS, add_format_options

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence
    from typing import Any


def add_parser(subparsers: Any) -> None:
    """`gpudiag check`."""
    import argparse

    check = subparsers.add_parser("check")
    check.add_argument(
        "snapshot",
        metavar="SNAPSHOT",
        help="a snapshot gpudiag wrote (--export, import -o), TOML or JSON; '-' reads stdin",
    )
    check.add_argument(
        "--rules",
        metavar="DIR",
        action="append",
        type=path_argument,  # pathlib is imported where a path is given
        default=argparse.SUPPRESS,
        help="also load the rule files in DIR",
    )
    check.add_argument(
        "--profile",
        metavar="NAME",
        default=argparse.SUPPRESS,
        help="judge against this GPU-model profile",
    )
    add_format_options(check, argparse.SUPPRESS)


# check's own options, each taking one value: what `plain_arguments` reads
_OPTIONS = ("rules", "profile", "format", "prometheus")


def plain_arguments(argv: Sequence[str]) -> Any:
    """The namespace argparse gives (gpudiag/cli_parser.py) for `check SNAPSHOT` with
    any of check's own options (--rules DIR, --profile NAME, --format F, --prometheus
    FILE; `--option VALUE` or `--option=VALUE`, in any order), read without importing
    argparse or building a parser (issue 44: 3 ms of the command); None for any other
    command line (a global option, -h, an abbreviation, a value that starts with '-', a
    bad --format: whatever argparse might read otherwise or refuse), which argparse then
    reads. tests/test_cli.py holds the two namespaces equal."""
    from types import SimpleNamespace

    from gpudiag import inputs

    given: dict[str, Any] = {}
    rules: list[Any] = []
    snapshot = None
    words = iter(argv[1:])
    for word in words:
        if word.startswith("--") and len(word) > 2:
            name, equals, value = word[2:].partition("=")
            if not equals:
                value = next(words, "")
            if name not in _OPTIONS or not value or value.startswith("-"):
                return None
            if name == "format" and value not in FORMATS:
                return None
            if name == "rules":
                rules.append(path_argument(value))  # appended, as argparse's action="append"
            else:
                given[name] = value  # the last one given, as argparse keeps
        elif (word.startswith("-") and word != "-") or snapshot is not None:
            return None
        else:
            snapshot = word
    if snapshot is None:
        return None
    return SimpleNamespace(
        **{
            # the global options' defaults (gpudiag/cli_parser.py's)
            "root": "/",
            "nvml_replay": None,
            "replay": None,
            "rules": rules,
            "export": None,
            "redact": False,
            "redact_key": None,
            "max_input": inputs.DEFAULT_MAX_INPUT,
            "profile": None,
            "kernels": None,
            "until_confident": None,
            "timeout_scale": 1.0,
            "format": None,
            "prometheus": None,
            "command": "check",
            "snapshot": snapshot,
            **given,
        }
    )


def run(args: argparse.Namespace) -> int:
    """Judge the snapshot again with the rules; print its findings (or --format). All
    of it with the garbage collector paused (PausedGC): the modules it imports and the
    snapshot it reads live to the end, and hold no cycles to collect."""
    with PausedGC():
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from gpudiag.model import Severity
    from gpudiag.output import render
    from gpudiag.rulefile import load_rules
    from gpudiag.session import (
        FINDING_INDENT,
        exit_code,
        format_finding,
        format_not_applicable,
        summary_lines,
        with_findings,
    )
    from gpudiag.termtext import output_width, wrap

    rules = load_rules(args.rules, site=True)
    snapshot = with_findings(load_snapshot(args.snapshot), rules, args.profile)
    if args.prometheus:
        write_prometheus(snapshot, args.prometheus)
    if args.format is not None:
        sys.stdout.write(render(snapshot, args.format, rules))
        return exit_code(snapshot.findings)
    # the summary's first line, the findings and the rules that did not apply, each
    # wrapped at the terminal's width under its indent (whole in a pipe)
    lines = [summary_lines(snapshot, rules)[0]]
    lines += [
        (format_finding(finding), FINDING_INDENT)
        for finding in snapshot.findings
        if finding.severity is not Severity.NOT_APPLICABLE
    ]
    lines += [(line, 2) for line in format_not_applicable(snapshot.findings)]
    width = output_width()
    for line, indent in lines:
        print("\n".join(wrap(line, width, indent)))
    return exit_code(snapshot.findings)
