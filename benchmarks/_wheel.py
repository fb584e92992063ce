"""What the benchmarks time: gpudiag as users install it, the wheel built from this
checkout in a fresh virtual environment, never the checkout's editable install. An
editable install (`pip install -e`) adds a path finder that imports `pathlib` and `re` at
every Python start: the reference process (`python -c pass`) costs 2.4x more there (41 ms
against 17 ms CPU) and hides gpudiag's own import cost.

`use_the_wheel()`, first thing in each benchmark, runs the script again under that
environment's Python (so that `sys.executable`, `-m gpudiag`, its `gpudiag` script and the
references all run there) and refuses to go on where gpudiag would come from the
checkout. The environment is made once per wheel (cached by the wheel's SHA-256 under
$GPUDIAG_BENCH_CACHE, default ~/.cache/gpudiag-bench) with the wheel installed without its
dependencies, which it takes from the environment the benchmark was started in (a plain
path, so that environment's .pth files, the editable finder's among them, do not run).
$GPUDIAG_BENCH_VENV names a ready environment instead (the suite builds one per run).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import site
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
INSIDE = "GPUDIAG_BENCH_INSIDE"  # set to the environment's prefix when re-run there
NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv*", ".nvml-old", "build", "dist", "*.egg-info", "__pycache__", "*.pyc",
    ".pytest_cache", ".ruff_cache", ".hypothesis", "tests", "benchmarks", "examples",
)  # fmt: skip


def build_wheel(out: Path) -> Path:
    """The wheel of this checkout's files, built from a copy (a stale build/ cannot leak
    into it), into OUT."""
    with tempfile.TemporaryDirectory() as scratch:
        source = Path(scratch) / "gpudiag"
        shutil.copytree(REPO, source, ignore=NOT_SOURCE)
        command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                   "--no-index", "-q", "-w", str(out), str(source)]  # fmt: skip
        # the same files, the same wheel, byte for byte (its entries' times are this
        # date's): the environment made for it is found again by its hash
        env = {**os.environ, "SOURCE_DATE_EPOCH": "315532800"}
        subprocess.run(command, check=True, capture_output=True, timeout=600, env=env)
    (wheel,) = out.glob("gpudiag-*.whl")
    return wheel


def install(wheel: Path, cache: Path) -> Path:
    """The environment with WHEEL installed (made if missing): its folder."""
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()[:16]
    target = cache / f"venv-{digest}"
    if (target / "ready").exists():
        return target
    shutil.rmtree(target, ignore_errors=True)  # a run that stopped half-way
    cache.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f"venv-{digest}-", dir=cache))
    venv.EnvBuilder(with_pip=False, clear=True).create(partial)
    python = partial / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
         "--no-index", str(wheel)],
        check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    where = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    # this environment's dependencies, as plain paths: their .pth files do not run there
    deps = [p for p in site.getsitepackages() if Path(p).is_dir()]
    (Path(where) / "gpudiag_bench_deps.pth").write_text("".join(f"{p}\n" for p in deps))
    # console scripts name the partial folder's Python: rename, then point them back
    try:
        partial.rename(target)
    except OSError:  # another run made it meanwhile
        shutil.rmtree(partial, ignore_errors=True)
        return target
    for script in (target / "bin").iterdir():
        if script.is_file() and not script.is_symlink():
            text = script.read_bytes()
            if text.startswith(b"#!") and str(partial).encode() in text:
                script.write_bytes(text.replace(str(partial).encode(), str(target).encode()))
    (target / "ready").write_text(str(wheel.name))
    return target


def use_the_wheel() -> None:
    """Run this script again in the wheel's environment (returns there), or exit 3 saying
    why it cannot report: gpudiag would come from the checkout (an editable install)."""
    import importlib.util

    if os.environ.get(INSIDE) == sys.prefix:
        spec = importlib.util.find_spec("gpudiag")
        origin = Path(spec.origin).resolve() if spec and spec.origin else None
        if origin is None or origin.is_relative_to(REPO):
            print(
                f"{Path(sys.argv[0]).name}: gpudiag here is the checkout's ({origin}), an"
                " editable install: its path finder runs at every Python start and hides"
                " gpudiag's import cost, so the figures would not be users'; not reported",
                file=sys.stderr,
            )
            sys.exit(3)
        return
    given = os.environ.get("GPUDIAG_BENCH_VENV")
    if given:
        target = Path(given)
    else:
        default = Path.home() / ".cache" / "gpudiag-bench"
        cache = Path(os.environ.get("GPUDIAG_BENCH_CACHE") or default)
        try:
            with tempfile.TemporaryDirectory() as out:
                target = install(build_wheel(Path(out)), cache)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as failed:
            said = failed.stderr or b""
            said = said.decode(errors="replace") if isinstance(said, bytes) else said
            # the build backend's error is the cause: the most indented in pip's output
            errors = [line for line in said.splitlines() if line.strip().startswith("error:")]
            indent = lambda line: len(line) - len(line.lstrip())  # noqa: E731
            last = max(errors, key=indent, default=str(failed)).strip()
            print(
                f"{Path(sys.argv[0]).name}: gpudiag's wheel could not be built and installed"
                f" with {sys.executable} (pip wheel needs setuptools>=68 and wheel): {last}",
                file=sys.stderr,
            )
            sys.exit(3)
    python = target / "bin" / "python"
    env = {**os.environ, INSIDE: str(target)}
    # Neither the script nor its children (`python -m gpudiag`, `python -c ...`) may put
    # the current folder first on their path: from the checkout's root it would give
    # them the checkout's gpudiag/ instead of the wheel's. PYTHONSAFEPATH (Python 3.11+)
    # keeps it off; the benchmarks' own folder is named instead, for `_wheel`.
    if sys.version_info < (3, 11) and (Path.cwd() / "gpudiag" / "__init__.py").is_file():
        print(
            f"{Path(sys.argv[0]).name}: run it from outside the checkout's root on Python"
            " 3.10 (its children would import the checkout's gpudiag/, not the wheel's)",
            file=sys.stderr,
        )
        sys.exit(3)
    env["PYTHONSAFEPATH"] = "1"
    env["PYTHONPATH"] = str(REPO / "benchmarks")
    script = str(Path(sys.argv[0]).resolve())
    os.execve(str(python), [str(python), script, *sys.argv[1:]], env)  # noqa: S606
