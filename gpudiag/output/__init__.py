"""Snapshot output in the forms other tools read, one module per format: the snapshot
itself as TOML or JSON (document.py), Prometheus' text format for node_exporter's textfile
collector (prometheus.py) and JUnit XML for acceptance pipelines (junit.py). Each format's
text is checked byte for byte against a golden file (tests/test_output_golden.py).

A new format: a module here with `render(snapshot, fmt, rules) -> str`, and its line in
WRITERS.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from importlib import import_module

# the command line loads this module for its options (add_format_options): what writing a
# format needs (the model, the rules engine, the catalog, XML) is imported where it is used
TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    import argparse
    from pathlib import Path
    from typing import IO

    from gpudiag.model import Action, Finding, Snapshot
    from gpudiag.rulefile import Rule

# each format: its name on the command line -> (its title, the module here that writes it)
WRITERS = {
    "toml": ("TOML", "document"),
    "json": ("JSON", "document"),
    "prometheus": ("Prometheus", "prometheus"),
    "junit": ("JUnit", "junit"),
}
FORMAT_NAMES = {name: title for name, (title, _) in WRITERS.items()}
FORMATS = tuple(FORMAT_NAMES)


def add_format_options(parser: argparse.ArgumentParser, default: object = None) -> None:
    """--format and --prometheus, for the headless export and for check."""
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default=default,
        help="with --export or check: write the snapshot in this form (default for --export:"
        " TOML, JSON for a .json file; prometheus: node_exporter's textfile format; junit:"
        " one test case per rule and subject)",
    )
    parser.add_argument(
        "--prometheus",
        metavar="FILE",
        default=default,
        help="with --export, check or health: also write FILE in node_exporter's textfile"
        " format (atomically; name it *.prom in the collector's folder)",
    )


def is_not_applicable(finding: Finding) -> bool:
    """A finding for a check that does not apply to this node. Such findings never count
    against a node (JUnit: skipped; Prometheus: a status label; NPD and Slurm: ignored)."""
    return finding.severity.value == "not-applicable"


def applicable(findings: Iterable[Finding]) -> list[Finding]:
    """The findings that count: every one except the not-applicable ones."""
    return [f for f in findings if not is_not_applicable(f)]


def strongest_action(findings: Iterable[Finding]) -> Action:
    """The strongest action any applicable finding recommends (none when there are none)."""
    from gpudiag.model import Action

    return max((f.action for f in applicable(findings)), key=lambda a: a.rank, default=Action.NONE)


def write_text(path: Path, text: str) -> None:
    """Write `text` to `path` atomically (temporary file beside it, then rename)."""
    from gpudiag.atomic import write_atomic

    def write(stream: IO[str]) -> None:
        stream.write(text)

    write_atomic(path, write)


def render(snapshot: Snapshot, fmt: str, rules: Sequence[Rule] = ()) -> str:
    """The snapshot as text in one of FORMATS."""
    module = import_module(f"gpudiag.output.{WRITERS[fmt][1]}")
    return module.render(snapshot, fmt, rules)
