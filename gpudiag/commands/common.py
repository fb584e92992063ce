"""What the commands share: the usage error, the live node the options describe, the
redactor, the TUI's launch, and writing a snapshot (and its --prometheus file).

Imported by the command line when it loads (`gpudiag --help`): what a helper needs is
imported when it runs.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from gpudiag import inputs

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable
    from pathlib import Path

    from gpudiag.model import Snapshot
    from gpudiag.redact import Redactor
    from gpudiag.rulefile import Rule
    from gpudiag.session import LiveNode


class UsageError(Exception):
    """Bad arguments; str() is the one-line message."""


def path_argument(text: str) -> Path:
    """An argparse type: a path (pathlib is imported when one is given, not by --help)."""
    from pathlib import Path

    return Path(text)


class PausedGC:
    """The cyclic garbage collector paused for a one-shot command's work (loading and
    judging or comparing snapshots), resumed after if it ran before. Their tens of
    thousands of readings live to the end of the command and hold no cycles; the
    collector's passes over them were a tenth of `check`'s and `diff`'s CPU time at 64
    GPUs (issue 44). Where the process ends with the command (`process_ends`, set by
    gpudiag.entry), what the work made is frozen (gc.freeze) before the collector
    resumes, so that it does not pass over every object once more before the exit (4 ms
    at 8 GPUs, 20 at 64); a caller that goes on (a test, a program calling cli.main)
    gets the collector back as it was. Never around the TUI, which runs for hours."""

    process_ends = False

    def __enter__(self) -> None:
        import gc

        self.collecting = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        import gc

        if self.collecting:
            if self.process_ends:
                gc.freeze()
            gc.enable()


def check_node_options(args: argparse.Namespace) -> None:
    """The global options that describe what to do with the live node (the TUI, --export
    and capture): which go together."""
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


def check_node_paths(args: argparse.Namespace) -> None:
    """What `live_node` refuses before reading anything: a --root that is no folder,
    --replay with --root or --nvml-replay."""
    from pathlib import Path

    if not Path(args.root).is_dir():
        raise UsageError(f"--root {args.root}: no such directory")
    if args.replay and (args.root != "/" or args.nvml_replay):
        raise UsageError("--replay holds the whole node: not with --root or --nvml-replay")


def is_this_machine(args: argparse.Namespace) -> bool:
    """The options describe this machine with its real NVML (no --root, --nvml-replay or
    --replay): kernels can measure it (as the TUI judges an opened node)."""
    from pathlib import Path

    return not args.replay and not args.nvml_replay and Path(args.root).resolve() == Path("/")


def live_node(args: argparse.Namespace) -> LiveNode:
    """The node the global options describe (--root, --nvml-replay, --replay, --rules,
    --timeout-scale, --profile); args.argv is its command line."""
    from pathlib import Path

    from gpudiag import capture
    from gpudiag.hostfs import HostFS
    from gpudiag.nvml import open_nvml
    from gpudiag.probes import default_probes
    from gpudiag.rulefile import load_rules
    from gpudiag.session import LiveNode

    check_node_paths(args)
    host, nvml = HostFS(Path(args.root)), None
    if args.replay:
        host, nvml, _ = capture.load(args.replay)
    return LiveNode(
        host=host,
        nvml=nvml or open_nvml(args.nvml_replay),
        probes=default_probes(),
        rules=load_rules(args.rules, site=True),
        command_line=("gpudiag", *args.argv),
        timeout_scale=args.timeout_scale,
        profile_name=args.profile,
    )


def redactor(args: argparse.Namespace) -> Redactor:
    """The redactor --redact-key asks for (a keyed hash), else the plain one."""
    from gpudiag.redact import Redactor, read_key

    key = None
    if getattr(args, "redact_key", None):
        try:
            key = read_key(args.redact_key)
        except inputs.InputError as exc:
            raise UsageError(f"--redact-key {exc}") from None
    return Redactor(key=key)


def redacted(snapshot: Snapshot, args: argparse.Namespace) -> Snapshot:
    """The snapshot, redacted when --redact was given."""
    if not getattr(args, "redact", False):
        if getattr(args, "redact_key", None):
            raise UsageError("--redact-key goes with --redact")
        return snapshot
    return redactor(args).snapshot(snapshot)


def write_and_report(
    snapshot: Snapshot,
    target: str,
    option: str,
    args: argparse.Namespace,
    rules: Sequence[Rule] | None = None,
) -> int:
    """Write the snapshot (or print it for '-') in --format, and the --prometheus file;
    then the summary; exit code by findings."""
    from pathlib import Path

    from gpudiag.output import FORMAT_NAMES, render, write_text
    from gpudiag.session import exit_code, summary_lines
    from gpudiag.snapshot import is_json_path, save, target_problem
    from gpudiag.termtext import output_width, wrap

    fmt = args.format or ("json" if is_json_path(target) else "toml")
    if args.prometheus:
        write_prometheus(snapshot, args.prometheus)
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
        if problem := target_problem(target):
            raise UsageError(f"{option} {target or repr(target)}: {problem}")
        try:
            if fmt in ("toml", "json") and args.format is None:
                save(snapshot, path)
            else:
                write_text(path, render(snapshot, fmt, _rules_for(rules, args)))
        except OSError as exc:
            raise UsageError(f"{option} {target}: cannot write: {exc.strerror or exc}") from None
        report = sys.stdout
    width = output_width(report)  # the summary wraps at a terminal's width, whole in a pipe
    for line, indent in summary_lines(snapshot, rules):
        print("\n".join(wrap(line, width, indent)), file=report)
    if target != "-":
        print("\n".join(wrap(f"wrote {target} ({FORMAT_NAMES[fmt]})", width)), file=report)
    return exit_code(snapshot.findings)


def _rules_for(rules: Sequence[Rule] | None, args: argparse.Namespace) -> Sequence[Rule]:
    """The rules the JUnit report lists as test cases."""
    if args.format != "junit":
        return ()
    from gpudiag.rulefile import load_rules

    return rules if rules is not None else load_rules(args.rules, site=True)


def write_prometheus(snapshot: Snapshot, target: str) -> None:
    """--prometheus FILE: node_exporter's textfile collector format, written atomically."""
    from pathlib import Path

    from gpudiag.output import render, write_text
    from gpudiag.snapshot import target_problem

    path = Path(target)
    if problem := target_problem(target):
        raise UsageError(f"--prometheus {target}: {problem}")
    try:
        write_text(path, render(snapshot, "prometheus"))
    except OSError as exc:
        raise UsageError(f"--prometheus {target}: cannot write: {exc.strerror or exc}") from None


def need_terminal() -> None:
    """The TUI draws on a terminal and reads its keys: with standard output a file, a pipe
    or cron's mail it would write escape codes there and never end."""
    for name, stream in (("output", sys.stdout), ("input", sys.stdin)):
        if stream is None or not stream.isatty():
            raise UsageError(
                f"standard {name} is not a terminal, so the TUI cannot start: run"
                " `gpudiag --export -` for the snapshot or `gpudiag health` for the verdict"
            )


class PendingNode:
    """A live node that the TUI opens after its first screen is painted (a
    gpudiag.tui.NodeOpener): reading an NVML replay, importing the probes and loading the
    rules wait until then. An error opening it (a bad replay or rule file) ends the TUI,
    and `tui` raises it as the command did before the TUI: one line, exit 3."""

    def __init__(self, make: Callable[[], LiveNode], measurable: bool) -> None:
        import threading

        self.make = make
        self.measurable = measurable  # kernels can run on it (`is_this_machine`)
        self.cancel = threading.Event()  # the node's, from before it is opened
        self.node: LiveNode | None = None
        self._lock = threading.Lock()

    def open(self) -> LiveNode:
        """The node, made on the first call (in the TUI's probing worker)."""
        from dataclasses import replace

        with self._lock:
            if self.node is None:
                self.node = replace(self.make(), cancel=self.cancel)
            return self.node

    def close(self) -> None:
        """Shut the node's NVML down, if it was opened."""
        with self._lock:
            if self.node is not None:
                self.node.nvml.close()


def tui(app_source: object, rules: Sequence[Rule] | None = None) -> int:
    """Run the TUI on a live node (opened, or a PendingNode) or a snapshot (with the
    `rules` that count what a saved one's findings checked); its exit code. A node that
    could not be opened: its error, raised once the terminal is restored."""
    need_terminal()
    from gpudiag.tui import GpudiagApp

    app = GpudiagApp(app_source, rules=rules)  # type: ignore[arg-type]
    app.run()
    if app.open_error is not None:
        raise app.open_error
    return int(app.return_code or 0)


def load_snapshot(path: str) -> Snapshot:
    """The snapshot `check` and `view` read; a file that is nvidia-smi output, not a
    snapshot, is refused saying so, with the `import` command that reads it (not 'not
    valid TOML')."""
    from gpudiag.snapshot import OtherGpudiagFile, SnapshotError, load

    try:
        return load(path)
    except SnapshotError as exc:
        if path == "-" or isinstance(exc, OtherGpudiagFile):  # it said what reads it
            raise
        from gpudiag.importing import detect

        try:
            kind = detect(inputs.read_text(path, "a snapshot"))
        except Exception:  # not nvidia-smi output either (or unreadable): the first error
            raise exc from None
        raise SnapshotError(
            path,
            f"nvidia-smi output ({FORMAT_WORDS.get(kind, kind)}), not a snapshot: "
            f"gpudiag import {path} -o node.toml reads it, then gpudiag check node.toml",
        ) from None


FORMAT_WORDS = {"xml": "-q -x", "q": "-q", "topo": "topo -m", "nvlink": "nvlink -s"}
