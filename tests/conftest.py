"""Shared test helpers: fixture paths, the shared real-world data, and the CLI runner."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import inspect
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpudiag.derive import derive
from gpudiag.hostfs import HostFS
from gpudiag.model import ProbeStatus, Reading
from gpudiag.nvml import Nvml, ReplayBackend
from gpudiag.probe import ProbeContext
from gpudiag.probes import default_probes
from gpudiag.session import LiveNode, probe_node

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).parent.parent
# Site rules for a replayed GPU node probed on a fixture tree without its PCIe devices: the
# bus-count rules (GPU002 fewer GPUs in NVML than on the bus, GPU031 more) would compare
# the replay's eight GPUs with the tree's none.
NO_BUS_RULES = (
    '[[override]]\nid = "GPU002"\ndisabled = true\n[[override]]\nid = "GPU031"\ndisabled = true\n'
)
REALDATA = Path(os.environ.get("GPUDIAG_REALDATA", REPO.parent / "shared" / "realdata"))
# The commands wrap their text at $COLUMNS (gpudiag/termtext.py): what the tests compare
# must not depend on the width of whoever runs the suite; a test that wants one sets it.
os.environ.pop("COLUMNS", None)


@pytest.fixture(scope="session", autouse=True)
def host_kernels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the CUDA fake builds the kernels it runs (kernels/*.cu, or a test's changed
    copy, compiled for the host by tests/fakekernels.py): one folder per pytest run, shared
    by its xdist workers and, through GPUDIAG_CUHOST_DIR, by the processes the tests start,
    so that each source is compiled once per run (when first launched, not before)."""
    folder, _ = built_once(tmp_path_factory, "cuhost", lambda folder: None)
    os.environ["GPUDIAG_CUHOST_DIR"] = str(folder)
    return folder


@pytest.fixture
def cuda():
    """The device boundary replaced by the CUDA fake (tests/fakecuda.py), two GPUs."""
    from gpudiag.kernels import device

    from fakecuda import FakeCuda

    fake = FakeCuda(2)
    previous = device.use(fake)
    yield fake
    device.use(previous)


@functools.cache
def demo_on_host_basic() -> Any:
    """The healthy demo HGX H100 replayed on the small host tree tests/fixtures/host-basic
    (only its GPUs matter), probed and judged with the shipped rules: built once per
    process (a Snapshot is immutable)."""
    from gpudiag.rulefile import load_rules

    return LiveNode(
        host=HostFS(FIXTURES / "host-basic"),
        nvml=Nvml(ReplayBackend.from_file(REPO / "snapshots" / "demo-hgx-h100-healthy.toml")),
        probes=default_probes(),
        rules=load_rules(),
    ).snapshot()


def realdata_dir() -> Path:
    """../shared/realdata, or skip the test with the reason."""
    if not REALDATA.is_dir():
        pytest.skip(f"shared real-world data not found at {REALDATA} (set GPUDIAG_REALDATA)")
    return REALDATA


@contextlib.contextmanager
def _locked(path: str | Path) -> Iterator[None]:
    """Hold an exclusive lock on the file at PATH (made if missing) while the block runs."""
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def machine_lock(name: str) -> contextlib.AbstractContextManager[None]:
    """An exclusive lock, machine-wide, named NAME (a file in /tmp): for what only one
    test at a time may use on this machine, whichever worker or pytest run it is in (the
    Slurm tests' fixed ports)."""
    return _locked(f"/tmp/gpudiag-tests-{name}.lock")


def built_once(
    tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], object]
) -> tuple[Path, object]:
    """BUILD(folder) run once per pytest run, shared by its xdist workers: the first worker
    to ask builds it in the run's shared temporary folder, under a lock; the others wait
    and reuse it. Returns the folder and what BUILD returned (as JSON holds it)."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the folder every worker of this run has its own folder in
    folder, done = base / f"shared-{name}", base / f"shared-{name}.json"
    with _locked(base / f"shared-{name}.lock"):
        if not done.exists():
            folder.mkdir()
            done.write_text(json.dumps(build(folder)))
        return folder, json.loads(done.read_text())


def _unpack_realdata_trees(dest: Path) -> dict[str, str]:
    """Every captured host tree in realdata/sysfs-procfs unpacked into DEST: name -> root."""
    base = realdata_dir() / "sysfs-procfs"
    roots: dict[str, str] = {}
    for archive in sorted((base / "raw").glob("*.tar.bz2")):
        name = archive.name.removesuffix(".tar.bz2")
        (dest / name).mkdir()
        if shutil.which("tar"):  # trusted archives from shared/realdata, 16,000 entries:
            # GNU tar unpacks them in 1 s of CPU, tarfile in 11 s (the same tree, modes
            # and relative symlinks, compared when this was written)
            command = ["tar", "-xjf", str(archive), "-C", str(dest / name), "--no-same-owner"]
            subprocess.run(command, check=True, capture_output=True)
        else:
            with tarfile.open(archive, "r:bz2") as tar:
                tar.extractall(dest / name, filter="tar")  # keeps their relative symlinks
        (inner,) = [p for p in (dest / name).iterdir() if p.is_dir()]
        roots[name] = str(inner)
    for archive in sorted((base / "raw").glob("*.ttar")):
        name = archive.name.removesuffix(".ttar")
        subprocess.run(
            [sys.executable, str(base / "unttar.py"), str(archive), str(dest / name)],
            check=True,
            capture_output=True,
        )
        fixtures = dest / name / "fixtures"
        roots[name] = str(fixtures if fixtures.is_dir() else dest / name)
    proc_only = dest / "node_exporter_proc"
    shutil.copytree(base / "node_exporter_proc", proc_only / "proc")
    roots["node_exporter_proc"] = str(proc_only)
    return roots


@pytest.fixture(scope="session")
def realdata_trees(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every captured host tree in realdata/sysfs-procfs, unpacked once, by name -> root."""
    realdata_dir()
    _, roots = built_once(tmp_path_factory, "realdata-trees", _unpack_realdata_trees)
    assert isinstance(roots, dict)
    return {name: Path(root) for name, root in roots.items()}


def _bench_wheel() -> object:
    """benchmarks/_wheel.py, the benchmarks' wheel builder (imported by path)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_wheel", REPO / "benchmarks" / "_wheel.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _wheel_and_environment(folder: Path) -> dict[str, str]:
    builder: Any = _bench_wheel()
    wheel = builder.build_wheel(folder)
    return {"wheel": str(wheel), "venv": str(builder.install(wheel, folder / "venvs"))}


def built_wheel(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """gpudiag's wheel, built from a copy of this checkout's files, and a fresh environment
    with it installed over this one's dependencies (benchmarks/_wheel.py): once per run,
    for the wheel's tests and the benchmarks. {"wheel": file, "venv": folder}."""
    _, built = built_once(tmp_path_factory, "wheel", _wheel_and_environment)
    assert isinstance(built, dict)
    return {name: Path(path) for name, path in built.items()}


@pytest.fixture(scope="session")
def wheel_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The environment of built_wheel, where the benchmarks time gpudiag as users run it."""
    return built_wheel(tmp_path_factory)["venv"]


def _bytecode_outside_the_tree() -> None:
    """Under PYTHONDONTWRITEBYTECODE (set on this project's machines), every `python -m
    gpudiag` the tests start compiled gpudiag from source again (about 0.15 s of CPU
    each, hundreds of times), and every xdist worker its test modules. Bytecode is
    written instead under a cache folder of this machine's temporary folder
    (PYTHONPYCACHEPREFIX), never beside the sources, by this process and the ones it
    starts. A PYTHONPYCACHEPREFIX of the caller's own is left as it is."""
    if not os.environ.get("PYTHONDONTWRITEBYTECODE") or os.environ.get("PYTHONPYCACHEPREFIX"):
        return
    prefix = Path(tempfile.gettempdir()) / f"gpudiag-tests-pycache-{os.getuid()}"
    os.environ["PYTHONPYCACHEPREFIX"] = str(prefix)
    del os.environ["PYTHONDONTWRITEBYTECODE"]
    sys.pycache_prefix = str(prefix)
    sys.dont_write_bytecode = False


_bytecode_outside_the_tree()


# The machine the suite's 5 minutes are measured on has two cores; a third worker fills the
# time tests spend waiting (on slurmctld, tmux panes, subprocess timeouts, Ctrl-C delays):
# 279 s against 318 s with two workers, the same 518 s of CPU, idle 2-core VM.
WORKERS = 3


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """The suite on WORKERS pytest-xdist workers, `--dist loadgroup`, unless the command
    line says how many (-n N; -n 0 or -p no:xdist: one process) or asks for --pdb. Here,
    not in pyproject's addopts, so that -p no:xdist and an environment without
    pytest-xdist still run the suite."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # a worker parses the command line again, which named no --dist: take the
        # controller's (pytest_configure_node)
        if getattr(config, "workerinput", {}).get("gpudiag_loadgroup"):
            config.option.loadgroup = True
        return
    if (
        config.option.numprocesses is None
        and not config.option.tx
        and not config.getoption("usepdb", False)
    ):
        config.option.numprocesses = WORKERS
    if config.option.numprocesses and config.option.dist == "no":
        config.option.dist = "loadgroup"


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:  # node: xdist's WorkerController
    """Tell each worker whether the run is `--dist loadgroup` (pytest_cmdline_main)."""
    node.workerinput["gpudiag_loadgroup"] = node.config.option.dist == "loadgroup"


def _tests_own(function: Callable[..., object]) -> bool:
    """A fixture defined in a test module or helper under tests/, not in this conftest
    (whose shared fixtures are built once for all workers) nor in pytest or a plugin."""
    path = Path(inspect.getfile(function)).resolve()
    return path.parent == Path(__file__).resolve().parent and path.name != "conftest.py"


def _shared_fixtures_untimed(item: pytest.Item) -> None:
    """pytest-timeout's per-test limit (pyproject's `timeout`, or the test's own mark)
    counts from the test's body, not its setup, where the test uses a shared fixture of
    the tests' own (scope module or session, not autouse: a stand-in library built and
    280 NVML cases run, a Slurm cluster started, a fleet generated, the real trees
    unpacked). Such a fixture is built once per run, by whichever test asks first, and
    takes as long as the machine's load makes it: at load 13-20 on 2 cores the NVML
    error table's took over the 120 s and its first test errored. Each such fixture
    bounds its own waits (its subprocesses' timeouts)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return
    shared = [
        d
        for defs in info.name2fixturedefs.values()
        for d in defs
        if d.scope in ("module", "session")
        and not getattr(d, "_autouse", False)
        and Path(inspect.getfile(d.func)).resolve().parent == Path(__file__).resolve().parent
    ]
    if not shared:
        return
    mark = item.get_closest_marker("timeout")
    args, kwargs = (mark.args, mark.kwargs) if mark is not None else ((), {})
    item.add_marker(pytest.mark.timeout(*args, **{**kwargs, "func_only": True}), append=False)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (`--dist loadgroup`, pytest_cmdline_main above): the tests that
    use a fixture of their module's own shared beyond one test (scope module or session:
    a built wheel, a running Slurm cluster, a generated fleet) run on one worker, so that
    it is made once; every other test goes to whichever worker is free. A test with an
    xdist_group of its own keeps it. And every test that uses a shared fixture of the
    tests' own (theirs or conftest's) is timed from its body on: _shared_fixtures_untimed."""
    for item in items:
        _shared_fixtures_untimed(item)
        if item.get_closest_marker("xdist_group") is not None:
            continue
        info = getattr(item, "_fixtureinfo", None)
        definitions = info.name2fixturedefs.values() if info is not None else ()
        module = getattr(item, "module", None)
        if module is not None and any(
            d.scope in ("module", "session") and _tests_own(d.func)
            for defs in definitions
            for d in defs
        ):
            item.add_marker(pytest.mark.xdist_group(module.__name__))


def modules_loaded_by(*statements: str) -> set[str]:
    """The modules a fresh interpreter holds after `import sys` and `statements` (what a
    command or a question imports, as a user's process would)."""
    code = "\n".join(("import sys", *statements, "print(' '.join(sorted(sys.modules)))"))
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    return set(result.stdout.split())


def run_cli(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run `python -m gpudiag ARGS` in a subprocess, as a user would."""
    full_env = {**os.environ, "NO_COLOR": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "gpudiag", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=full_env,
        timeout=timeout,
        check=False,
    )


def probe_readings(
    root: Path, replay: str = "replay-no-driver.toml", is_root_user: bool | None = True
) -> dict[str, Reading]:
    """Every reading of the default probes on a host tree, by key, with those derived from
    them (the GPU-NIC topology, the profile match) as a judged snapshot holds them. Every
    probe must end ok, but for those that need NVML where the replay has none."""
    context = ProbeContext(
        host=HostFS(root, is_root_user=is_root_user),
        nvml=Nvml(ReplayBackend.from_file(FIXTURES / replay)),
    )
    results = probe_node(default_probes(), context)
    for r in results:
        skipped_for_nvml = r.status is ProbeStatus.SKIPPED and r.error.startswith("needs NVML")
        assert r.status is ProbeStatus.OK or skipped_for_nvml, (r.name, r.error)
    readings = {reading.key: reading for r in results for reading in r.readings}
    return readings | {r.key: r for r in derive(readings).result.readings}


def ok_values(readings: dict[str, Reading]) -> dict[str, object]:
    """The values of the readings that were taken."""
    return {key: r.value for key, r in readings.items() if r.ok}
