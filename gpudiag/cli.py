"""The `gpudiag` command line.

    gpudiag [--root DIR] [--nvml-replay FILE] [--rules DIR]      the TUI on this node
    gpudiag [...] --export FILE                                  headless snapshot ('-': stdout)
    gpudiag check SNAPSHOT [--rules DIR]                         findings of a saved snapshot
    gpudiag view SNAPSHOT                                        a saved snapshot in the TUI
    gpudiag [...] health [--for nagios|npd|slurm|json]           the check for fleets (health.py)

Exit codes: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN (bad input, usage error, failure).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from gpudiag import __version__, capture, inputs
from gpudiag.fleetcli import FLEET_COMMANDS, add_fleet_commands
from gpudiag.health import add_health_parser
from gpudiag.kernels.plans import BURN_PRECISIONS, DTYPE_NAMES, KERNELS, PLANS, KernelPlan
from gpudiag.output import add_format_options

# What a command needs is imported when it runs (`gpudiag --help` and `--version` load
# only the parser's modules): the imports inside the functions below are deliberate.
if TYPE_CHECKING:
    from gpudiag.model import Snapshot
    from gpudiag.redact import Redactor
    from gpudiag.rulefile import Rule
    from gpudiag.session import LiveNode

# What each kernel of `gpudiag run` measures, one line each (its --help lists them).
KERNEL_HELP = {
    "stream": "memory bandwidth: copy, scale, add, triad, dot (GB/s)",
    "gemm": "matrix multiply throughput (TFLOP/s), every product checked",
    "copy": "host-to-GPU and GPU-to-host copies, local and remote NUMA node",
    "peer": "GPU-to-GPU copies and latency, every pair, peer access",
    "allreduce": "NCCL all-reduce across the node's GPUs (bus bandwidth)",
    "burn": "one GEMM again and again (--seconds); a mismatch is FAULTY",
}


class UsageError(Exception):
    """Bad arguments; str() is the one-line message."""


def _size(text: str) -> int:
    """An argparse type: a size in bytes ('512M', '2G')."""
    try:
        return inputs.parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line and exits 3."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see gpudiag --help)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (its --help is the command-line reference)."""
    parser = _Parser(
        prog="gpudiag",
        description="Bring up and diagnose a GPU server node.",
        epilog="Exit codes: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN (bad input or failure).",
    )
    parser.add_argument("--version", action="version", version=f"gpudiag {__version__}")
    parser.add_argument(
        "--root",
        metavar="DIR",
        default="/",
        help="read host files below DIR (a captured tree: DIR/sys, DIR/proc, ...)",
    )
    parser.add_argument(
        "--nvml-replay",
        metavar="FILE",
        help="answer NVML calls from a recorded replay file instead of the driver",
    )
    parser.add_argument(
        "--replay",
        metavar="CAPTURE",
        help="probe a node recorded by 'gpudiag capture' as if it were this one",
    )
    parser.add_argument(
        "--rules",
        metavar="DIR",
        action="append",
        default=[],
        type=Path,
        help="also load the *.toml rule files in DIR (repeatable)",
    )
    parser.add_argument(
        "--export",
        metavar="FILE",
        help="headless: write a snapshot to FILE (TOML; JSON if it ends in .json;"
        " '-' for stdout) and print a summary",
    )
    parser.add_argument(
        "--redact",
        action="store_true",
        help="with --export: replace host names, serials, UUIDs, MAC and IP addresses",
    )
    parser.add_argument(
        "--redact-key",
        metavar="FILE",
        help="with --redact: placeholders are a keyed hash (HMAC) of each value with the key"
        " in FILE, the same in every export made with the same key",
    )
    parser.add_argument(
        "--max-input",
        metavar="SIZE",
        type=_size,
        default=inputs.DEFAULT_MAX_INPUT,
        help="largest snapshot, import, replay or rule file read (default 256M)",
    )
    parser.add_argument(
        "--profile",
        metavar="NAME",
        help="judge against this GPU-model profile instead of the detected one",
    )
    parser.add_argument(
        "--kernels",
        choices=tuple(PLANS),
        help="with --export: also run kernels on the CPU and every GPU and add their results"
        " (quick: STREAM, GEMM, copies; full: larger, and a 60 s burn)",
    )
    parser.add_argument(
        "--until-confident",
        type=inputs.number_option(0, 86400, above=True),
        metavar="S",
        help="with --kernels: STREAM goes on until its intervals are within 3%% or S seconds",
    )
    parser.add_argument(
        "--timeout-scale",
        type=inputs.number_option(0, 100, above=True),
        default=1.0,
        metavar="X",
        help="multiply every probe's timeout by X (slow or loaded nodes)",
    )
    add_format_options(parser)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    check = commands.add_parser("check", help="evaluate the rules on a saved snapshot")
    check.add_argument("snapshot", metavar="SNAPSHOT")
    check.add_argument(
        "--rules",
        metavar="DIR",
        action="append",
        type=Path,
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
    diff = commands.add_parser("diff", help="compare two snapshots: what differs, and why")
    diff.add_argument("snapshot_a", metavar="A")
    diff.add_argument("snapshot_b", metavar="B")
    diff.add_argument(
        "--format",
        choices=("text", "markdown", "json"),
        default=None,
        help="print a report in this form (default: the TUI in a terminal, else text)",
    )
    diff.add_argument(
        "--all",
        action="store_true",
        help="also show readings that always differ (serials, idle clocks, ...)",
    )
    diff.add_argument(
        "--redact",
        action="store_true",
        default=argparse.SUPPRESS,
        help="replace host names, serials, UUIDs, MAC and IP addresses",
    )
    run = commands.add_parser(
        "run",
        help="run measurement kernels and print the results",
        description="Run measurement kernels and print the results. Kernels:\n"
        + "\n".join(f"  {name:<10} {KERNEL_HELP[name]}" for name in KERNELS),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument(
        "kernels",
        metavar="KERNEL",
        nargs="+",
        choices=KERNELS,
        help=f"one or more of: {', '.join(KERNELS)} (above)",
    )
    run.add_argument(
        "--device",
        default="cpu",
        help="cpu (every NUMA node), gpu (every GPU), all, or a GPU index",
    )
    run.add_argument(
        "--size",
        type=inputs.number_option(4096, 2**62, integer=True),  # and this machine's memory
        default=256 * 2**20,
        metavar="BYTES",
        help="bytes per array (default 256 MiB: well beyond the last-level cache)",
    )
    run.add_argument(
        "--trials",
        type=inputs.number_option(2, 10**6, integer=True),
        default=10,
        help="measured rounds after warm-up (at least 2: statistics need two samples)",
    )
    run.add_argument(
        "--seconds",
        type=inputs.number_option(0, 7 * 86400, above=True),
        metavar="S",
        help="how long the burn runs (default 60); for STREAM and GEMM, keep running trials"
        " until S seconds have passed",
    )
    run.add_argument(
        "--dtype", choices=(*DTYPE_NAMES, "both"), default="fp64", help="STREAM's element type"
    )
    run.add_argument(
        "--until-confident",
        type=inputs.number_option(0, 86400, above=True),
        metavar="S",
        help="STREAM: after the trials, go on until every interval of the median is within"
        " 3%% of it (enough for diff to judge), or S seconds have passed",
    )
    run.add_argument(
        "--gemm-n",
        type=inputs.number_option(1, 2**31, integer=True),  # and this machine's memory
        default=4096,
        metavar="N",
        help="GEMM matrix size (N x N; default 4096)",
    )
    run.add_argument(
        "--burn-precision", choices=BURN_PRECISIONS, default="fp32", help="the GPU burn's GEMM"
    )
    rules = commands.add_parser("rules", help="list, explain and lint rules; list profiles")
    rules_commands = rules.add_subparsers(dest="rules_command", metavar="ACTION", required=True)
    rules_commands.add_parser("list", help="every rule: id, severity, status, scope, title")
    explain = rules_commands.add_parser("explain", help="what a rule checks, why, how to fix")
    explain.add_argument("rule_id", metavar="ID")
    lint = rules_commands.add_parser("lint", help="check rule files without running them")
    lint.add_argument("lint_files", metavar="FILE", nargs="+", type=Path)
    rules_commands.add_parser("profiles", help="the GPU-model profiles and their device ids")
    from gpudiag.watch_cli import add_parsers as add_watch_parsers

    add_watch_parsers(commands)  # watch and demo (gpudiag/watch_cli.py)
    capture.add_parser(commands)
    view = commands.add_parser("view", help="open a saved snapshot in the TUI (read-only)")
    view.add_argument("snapshot", metavar="SNAPSHOT")
    imports = commands.add_parser(
        "import",
        help="turn nvidia-smi outputs (-q -x XML, -q text, a bug report, topo -m, nvlink -s) "
        "into a snapshot",
    )
    imports.add_argument(
        "files",
        metavar="FILE",
        nargs="+",
        help="an nvidia-smi output; '-' reads standard input; gzip data (an "
        "nvidia-bug-report.log.gz) is unpacked",
    )
    imports.add_argument(
        "-o",
        "--output",
        metavar="SNAPSHOT",
        required=True,
        help="the snapshot to write (TOML; JSON if it ends in .json; '-' stdout)",
    )
    add_health_parser(commands)
    add_fleet_commands(commands)
    return parser


def _live_node(args: argparse.Namespace, argv: Sequence[str]) -> LiveNode:
    from gpudiag.hostfs import HostFS
    from gpudiag.nvml import open_nvml
    from gpudiag.probes import default_probes
    from gpudiag.rulefile import load_rules
    from gpudiag.session import LiveNode

    root = Path(args.root)
    if not root.is_dir():
        raise UsageError(f"--root {args.root}: no such directory")
    host, nvml = HostFS(root), None
    if args.replay:
        if args.root != "/" or args.nvml_replay:
            raise UsageError("--replay holds the whole node: not with --root or --nvml-replay")
        host, nvml, _ = capture.load(args.replay)
    return LiveNode(
        host=host,
        nvml=nvml or open_nvml(args.nvml_replay),
        probes=default_probes(),
        rules=load_rules(args.rules, site=True),
        command_line=("gpudiag", *argv),
        timeout_scale=args.timeout_scale,
        profile_name=args.profile,
    )


def _export(node: LiveNode, args: argparse.Namespace) -> int:
    snapshot = node.snapshot()
    if args.kernels:
        from dataclasses import replace

        from gpudiag.session import with_kernel_results

        plan = replace(PLANS[args.kernels], until_confident=args.until_confident)
        print(f"gpudiag: running kernels ({args.kernels}) ...", file=sys.stderr)
        from gpudiag.kernels.runner import PlanRun
        from gpudiag.run_report import print_results, run_with_progress

        run = PlanRun(plan, node.host, nvml=node.nvml)
        # progress per kernel as `gpudiag run` shows it, then the results table, on
        # stderr (stdout may be the snapshot: --export -)
        results, interrupted, others = run_with_progress(run, strict=False)
        print_results(run, results, others, sys.stderr)
        if interrupted:  # the results so far are shown; nothing is written
            raise KeyboardInterrupt
        snapshot = with_kernel_results(snapshot, results, node.rules, node.profile_name)
    snapshot = _redacted(snapshot, args)
    return _write_and_report(snapshot, args.export, "--export", args, node.rules)


def _redactor(args: argparse.Namespace) -> Redactor:
    from gpudiag.redact import Redactor, read_key

    key = None
    if getattr(args, "redact_key", None):
        try:
            key = read_key(args.redact_key)
        except inputs.InputError as exc:
            raise UsageError(f"--redact-key {exc}") from None
    return Redactor(key=key)


def _redacted(snapshot: Snapshot, args: argparse.Namespace) -> Snapshot:
    """The snapshot, redacted when --redact was given."""
    if not getattr(args, "redact", False):
        if getattr(args, "redact_key", None):
            raise UsageError("--redact-key goes with --redact")
        return snapshot
    return _redactor(args).snapshot(snapshot)


def _run_kernels(args: argparse.Namespace) -> int:
    # --trials, --seconds, --until-confident, --size and --gemm-n: inputs.number_option
    import psutil

    from gpudiag.session import EXIT_CRITICAL

    memory = psutil.virtual_memory().total
    if 3 * args.size > memory:
        raise UsageError(
            f"--size {args.size}: three arrays of that size exceed this machine's memory"
            f" ({memory / 2**30:.1f} GiB)"
        )
    if 3 * 8 * args.gemm_n**2 > memory:
        raise UsageError(
            f"--gemm-n {args.gemm_n}: three {args.gemm_n} x {args.gemm_n} matrices exceed"
            f" this machine's memory ({memory / 2**30:.1f} GiB)"
        )
    plan = KernelPlan(
        tuple(dict.fromkeys(args.kernels)),
        args.device,
        args.size,
        DTYPE_NAMES if args.dtype == "both" else (args.dtype,),
        args.trials,
        args.seconds,
        args.gemm_n,
        60.0 if args.seconds is None else args.seconds,
        args.burn_precision,
        args.until_confident,
    )
    from gpudiag.kernels.runner import KernelUnavailable, PlanRun
    from gpudiag.run_report import print_results, run_with_progress

    run = PlanRun(plan)
    interrupted = False
    try:
        results, interrupted, others = run_with_progress(run)
    except KernelUnavailable as exc:
        raise UsageError(f"--device {args.device}: {exc}") from None
    except KeyboardInterrupt:  # Ctrl-C: the results so far, then exit 130
        run.cancel.set()
        results, interrupted = run.results, True
    failed = print_results(run, results, others)
    if interrupted:
        print("gpudiag: interrupted (the results above are partial)", file=sys.stderr)
        return 130
    return EXIT_CRITICAL if failed or any(b.faulty for b in run.burns) else 0


def _diff(args: argparse.Namespace) -> int:
    import json

    from gpudiag.diff import diff_snapshots, report_json, report_text
    from gpudiag.snapshot import load

    a, b = load(args.snapshot_a), load(args.snapshot_b)
    if getattr(args, "redact", False):
        redactor = _redactor(args)
        a, b = redactor.snapshot(a), redactor.snapshot(b)
    result = diff_snapshots(a, b)
    if args.format is None and sys.stdout.isatty() and sys.stdin.isatty():
        from gpudiag.tui_diff import DiffApp

        app = DiffApp(result, a, b, args.all, (args.snapshot_a, args.snapshot_b))
        app.run()
        return int(app.return_code or 0) if app.signalled else result.exit_code()
    if args.format == "json":
        print(json.dumps(report_json(result, args.all), indent=1))
    else:
        sys.stdout.write(report_text(result, a, b, args.all, args.format == "markdown"))
    return result.exit_code()


def _import(args: argparse.Namespace) -> int:
    from gpudiag.importing import ImportError_, import_files
    from gpudiag.rulefile import load_rules
    from gpudiag.session import with_findings

    try:
        snapshot = import_files(args.files)
    except ImportError_ as exc:
        raise UsageError(str(exc)) from None
    rules = load_rules(args.rules, site=True)
    snapshot = with_findings(snapshot, rules, args.profile)
    return _write_and_report(_redacted(snapshot, args), args.output, "-o", args, rules)


def _write_and_report(
    snapshot: Snapshot,
    target: str,
    option: str,
    args: argparse.Namespace,
    rules: Sequence[Rule] | None = None,
) -> int:
    """Write the snapshot (or print it for '-') in --format, and the --prometheus file;
    then the summary; exit code by findings."""
    from gpudiag.output import FORMAT_NAMES, render, write_text
    from gpudiag.session import exit_code, format_summary
    from gpudiag.snapshot import is_json_path, save, target_problem

    fmt = args.format or ("json" if is_json_path(target) else "toml")
    if args.prometheus:
        _write_prometheus(snapshot, args.prometheus)
    if target == "-":
        if sys.stdout is None:
            raise UsageError(f"{option} -: standard output is closed")
        try:
            sys.stdout.write(render(snapshot, fmt, _rules_for(rules, args)))
            sys.stdout.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise UsageError(
                f"{option} -: cannot write to standard output: {exc.strerror or exc}"
            ) from None
        report = sys.stderr
    else:
        path = Path(target)
        if problem := target_problem(path):
            raise UsageError(f"{option} {target}: {problem}")
        try:
            if fmt in ("toml", "json") and args.format is None:
                save(snapshot, path)
            else:
                write_text(path, render(snapshot, fmt, _rules_for(rules, args)))
        except OSError as exc:
            raise UsageError(f"{option} {target}: cannot write: {exc.strerror or exc}") from None
        report = sys.stdout
    print(format_summary(snapshot, rules), file=report)
    if target != "-":
        print(f"wrote {target} ({FORMAT_NAMES[fmt]})", file=report)
    return exit_code(snapshot.findings)


def _rules_for(rules: Sequence[Rule] | None, args: argparse.Namespace) -> Sequence[Rule]:
    """The rules the JUnit report lists as test cases."""
    if args.format != "junit":
        return ()
    from gpudiag.rulefile import load_rules

    return rules if rules is not None else load_rules(args.rules, site=True)


def _write_prometheus(snapshot: Snapshot, target: str) -> None:
    """--prometheus FILE: node_exporter's textfile collector format, written atomically."""
    from gpudiag.output import render, write_text
    from gpudiag.snapshot import target_problem

    path = Path(target)
    if problem := target_problem(path):
        raise UsageError(f"--prometheus {target}: {problem}")
    try:
        write_text(path, render(snapshot, "prometheus"))
    except OSError as exc:
        raise UsageError(f"--prometheus {target}: cannot write: {exc.strerror or exc}") from None


def _check(args: argparse.Namespace) -> int:
    from gpudiag.model import Severity
    from gpudiag.output import render
    from gpudiag.rulefile import load_rules
    from gpudiag.session import (
        exit_code,
        format_finding,
        format_not_applicable,
        format_summary,
        with_findings,
    )
    from gpudiag.snapshot import load

    rules = load_rules(args.rules, site=True)
    snapshot = with_findings(load(args.snapshot), rules, args.profile)
    if args.prometheus:
        _write_prometheus(snapshot, args.prometheus)
    if args.format is not None:
        sys.stdout.write(render(snapshot, args.format, rules))
        return exit_code(snapshot.findings)
    print(format_summary(snapshot, rules).splitlines()[0])
    for finding in snapshot.findings:
        if finding.severity is not Severity.NOT_APPLICABLE:
            print(format_finding(finding))
    for line in format_not_applicable(snapshot.findings):
        print(line)
    return exit_code(snapshot.findings)


def _rules(args: argparse.Namespace) -> int:
    if args.rules_command == "lint":
        return _lint(args.lint_files)
    if args.rules_command == "profiles":
        from gpudiag.profiles import load_profiles

        for profile in load_profiles().values():
            words = [*profile.brands, *profile.name_words]
            classes = f"(brand or name: {', '.join(dict.fromkeys(words))})" if words else ""
            ids = ", ".join(profile.device_ids) or classes or "(select with --profile)"
            print(f"{profile.name:<16} {profile.title:<44} {ids}")
        return 0
    from gpudiag.rulefile import load_rules

    rules = load_rules(args.rules, site=True)
    if args.rules_command == "list":
        for rule in rules:
            state = "disabled" if rule.disabled else rule.status
            print(
                f"{rule.id:<8} {rule.severity.value:<8} {state:<10} {rule.applies_to:<11} "
                f"{rule.title}"
            )
        return 0
    rule = next((r for r in rules if r.id == args.rule_id.upper()), None)
    if rule is None:
        raise UsageError(f"no rule {args.rule_id} (gpudiag rules list shows them)")
    print(explain_rule(rule))
    return 0


def explain_rule(rule: Rule) -> str:
    """What a rule checks, why it matters, how to fix it, an example: ruff's explain."""
    from gpudiag import catalog
    from gpudiag.rulefile import action_for

    expectation = f"{rule.operator.replace('_', ' ')} {rule.operand!r}"
    if rule.factor != 1.0:
        expectation += f" x {rule.factor:g}"
    subject = catalog.SUBJECTS[rule.applies_to]
    declared = catalog.find(catalog.sample_key(rule.reading))
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
            rules, overrides = lint_rule_file(path)
        except RuleError as exc:
            print(inputs.printable(str(exc)))
            failed = True
            continue
        print(f"{path}: ok ({rules} rules, {overrides} overrides)")
    return EXIT_UNKNOWN if failed else 0


def _need_terminal() -> None:
    """The TUI draws on a terminal and reads its keys: with standard output a file, a pipe
    or cron's mail it would write escape codes there and never end."""
    for name, stream in (("output", sys.stdout), ("input", sys.stdin)):
        if stream is None or not stream.isatty():
            raise UsageError(
                f"standard {name} is not a terminal, so the TUI cannot start: run"
                " `gpudiag --export -` for the snapshot or `gpudiag health` for the verdict"
            )


def _tui(app_source: object) -> int:
    _need_terminal()
    from gpudiag.tui import GpudiagApp

    app = GpudiagApp(app_source)
    app.run()
    return int(app.return_code or 0)


def run(argv: Sequence[str]) -> int:
    """Run the command line; returns the exit code. Raises only for internal errors."""
    args = build_parser().parse_args(list(argv))
    inputs.set_limit(args.max_input)
    if getattr(args, "redact", False) and not (
        args.command in ("import", "diff", "capture") or (args.command is None and args.export)
    ):
        raise UsageError(
            "--redact goes with --export, import, diff or capture (nothing else writes)"
        )
    if args.command == "view" and args.snapshot == "-":
        raise UsageError("view reads the keyboard on standard input: name a snapshot file")
    if args.command == "check":
        return _check(args)
    if args.command == "view":
        from gpudiag.derive import ensure_derived
        from gpudiag.snapshot import load

        return _tui(ensure_derived(load(args.snapshot)))
    if args.command == "import":
        return _import(args)
    if args.command == "rules":
        return _rules(args)
    if args.command == "diff":
        return _diff(args)
    if args.command == "run":
        return _run_kernels(args)
    if args.command == "health":
        from gpudiag.health import run_health

        return run_health(args, argv)
    if args.command in FLEET_COMMANDS:
        return FLEET_COMMANDS[args.command](args)
    if args.command in ("watch", "demo"):
        from gpudiag.watch_cli import run_command

        return run_command(args, argv)
    if (args.format or args.prometheus) and not args.export:
        raise UsageError("--format and --prometheus go with --export or check")
    if args.until_confident is not None and not args.kernels:
        raise UsageError("--until-confident takes positive seconds and goes with --kernels")
    if args.kernels and not args.export:
        raise UsageError("--kernels goes with --export (the TUI runs kernels on request: k)")
    if args.kernels and (args.root != "/" or args.nvml_replay or args.replay):
        raise UsageError(
            "--kernels measures this machine: it cannot go with --root or --nvml-replay"
        )
    if args.command is None and not args.export:
        _need_terminal()  # before probing the node
    node = _live_node(args, argv)
    try:
        if args.command == "capture":
            return capture.run_capture(node, args, _redactor(args) if args.redact else None)
        if args.export:
            return _export(node, args)
        return _tui(node)
    finally:
        node.nvml.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: one-line errors and exit 3 for bad input, never a traceback."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        return run(argv)
    except KeyboardInterrupt:
        print("gpudiag: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # stdout closed early (gpudiag --export - | head): not an error of ours.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return _EXIT_UNKNOWN
    except _user_errors() as exc:
        print(f"gpudiag: {inputs.printable(str(exc))}", file=sys.stderr)
        return _EXIT_UNKNOWN
    except Exception as exc:
        if os.environ.get("GPUDIAG_DEBUG"):
            import traceback

            traceback.print_exc()
        print(
            f"gpudiag: internal error: {type(exc).__name__}: {inputs.printable(str(exc))} "
            "(set GPUDIAG_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return _EXIT_UNKNOWN


# the errors that are bad input (one line, exit 3): (module, class name)
_USER_ERRORS = (
    ("gpudiag.snapshot", "SnapshotError"),
    ("gpudiag.nvml", "ReplayError"),
    ("gpudiag.rule_operators", "RuleError"),
    ("gpudiag.inputs", "InputError"),
    ("gpudiag.capture", "CaptureError"),
)
_EXIT_UNKNOWN = 3  # gpudiag.session.EXIT_UNKNOWN (test_cli checks they agree)


def _user_errors() -> tuple[type[Exception], ...]:
    """UsageError and the _USER_ERRORS of the modules this run loaded (a module that was
    never imported raised nothing), so that an error costs no import."""
    loaded = (sys.modules.get(module) for module, _ in _USER_ERRORS)
    return (
        UsageError,
        *(getattr(m, name) for m, (_, name) in zip(loaded, _USER_ERRORS, strict=True) if m),
    )


if __name__ == "__main__":
    sys.exit(main())
