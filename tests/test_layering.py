"""The core (gpudiag/ and its packages) does not import the plugins (gpudiag.probes.<module>,
gpudiag.kernels.<module>) when it loads, but for the registries that must list them. What
they share lives in core modules (gpudiag/catalog.py: the key grammar and the declared
readings). An import inside a function (a kernel run, a probe's decoder used on demand)
is not counted: it costs nothing until used."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from conftest import REPO

PLUGIN_PACKAGES = {"gpudiag.probes": REPO / "probes", "gpudiag.kernels": REPO / "kernels"}
# (core file, plugin module) -> why it may import it when it loads
ALLOWED = {
    ("gpudiag/commands/run.py", "gpudiag.kernels.plans"): (
        "the kernel plan registry: `run`'s kernels and their help, one line each"
    ),
    ("gpudiag/panes/kernels.py", "gpudiag.kernels.plans"): (
        "the kernel plan registry: the kernels screen lists the plans it offers"
    ),
    ("gpudiag/tui.py", "gpudiag.kernels.plans"): (
        "the kernel plan registry: the kernels screen offers its kernels and plans"
    ),
    ("gpudiag/run_report.py", "gpudiag.kernels.runner"): (
        "the kernel runner's entry point for `gpudiag run` (its progress and results)"
    ),
    ("gpudiag/derive.py", "gpudiag.probes.topology"): (
        "the derivation registry: the GPU-NIC topology is one of the derivations it lists"
    ),
    ("gpudiag/derive.py", "gpudiag.kernels.readings"): (
        "the derivation registry: the kernel readings are one of the derivations it lists"
    ),
}


def _loading_imports(tree: ast.Module) -> Iterator[ast.stmt]:
    """The import statements that run when the module loads (top level, and inside
    top-level if/try blocks), not those inside functions or classes."""
    stack: list[ast.stmt] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If | ast.Try):
            stack.extend(node.body + node.orelse)
            if isinstance(node, ast.Try):
                stack.extend(node.finalbody)
                for handler in node.handlers:
                    stack.extend(handler.body)


def _plugin_modules(node: ast.stmt) -> set[str]:
    """The plugin modules an import statement loads: gpudiag.probes.gpu for
    `from gpudiag.probes.gpu import x`, `from gpudiag.probes import gpu` or
    `import gpudiag.probes.gpu`; the packages' registries themselves are not plugins."""
    found = set()
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        assert isinstance(node, ast.ImportFrom)
        base = node.module or ""
        names = [base] + [f"{base}.{a.name}" for a in node.names]
    for name in names:
        for package, folder in PLUGIN_PACKAGES.items():
            if not name.startswith(package + "."):
                continue
            module = name.removeprefix(package + ".").split(".")[0]
            if (folder / f"{module}.py").is_file():
                found.add(f"{package}.{module}")
    return found


def _core_plugin_imports() -> set[tuple[str, str]]:
    found = set()
    for path in sorted((REPO / "gpudiag").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in _loading_imports(tree):
            for module in _plugin_modules(node):
                found.add((path.relative_to(REPO).as_posix(), module))
    return found


def test_the_core_imports_no_plugin_when_it_loads_but_the_registries() -> None:
    unexpected = sorted(_core_plugin_imports() - set(ALLOWED))
    assert unexpected == [], (
        f"core modules import plugins when they load: {unexpected}; move what they share "
        "into a core module (gpudiag/catalog.py for key grammar), or import it where it is used"
    )


def test_every_allowed_import_is_still_made() -> None:
    assert sorted(set(ALLOWED) - _core_plugin_imports()) == []


def test_the_check_sees_each_form_of_import() -> None:
    forms = (
        "from gpudiag.probes.gpu import normalize_bus_id",
        "from gpudiag.probes import gpu",
        "import gpudiag.probes.gpu",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from gpudiag.probes import gpu",
    )
    for text in forms:
        imports = [m for n in _loading_imports(ast.parse(text)) for m in _plugin_modules(n)]
        assert imports == ["gpudiag.probes.gpu"], text
    # the registry, and an import made only when a function runs, are not counted
    for text in (
        "from gpudiag.probes import default_probes",
        "def f():\n    from gpudiag.probes.gpu import normalize_bus_id",
    ):
        assert [m for n in _loading_imports(ast.parse(text)) for m in _plugin_modules(n)] == []


# ------------------------------------------------------------------ no circles


def _module_files() -> dict[str, Path]:
    """Every module of the package by its import name: gpudiag.x, gpudiag.probes.y, ..."""
    found: dict[str, Path] = {}
    for package, folder in {"gpudiag": REPO / "gpudiag", **PLUGIN_PACKAGES}.items():
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            if package == "gpudiag" and parts and parts[0] in ("probes", "kernels"):
                continue  # a stray copy, if any; the real ones are under probes/, kernels/
            found[".".join([package, *parts])] = path
    return found


def _imported_names(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = module if is_package else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}" if base else package
    return [base] + [f"{base}.{alias.name}" for alias in node.names]


def import_graphs() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(imports made when each module loads, imports made inside its functions)."""
    files = _module_files()

    def owner(name: str) -> str:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name

    loading: dict[str, set[str]] = {}
    lazy: dict[str, set[str]] = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        at_load = set(_loading_imports(tree))
        loading[module], lazy[module] = set(), set()
        for node in ast.walk(tree):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            for name in _imported_names(node, module, path.name == "__init__.py"):
                target = owner(name) if name.startswith("gpudiag") else ""
                if target and target != module:
                    (loading if node in at_load else lazy)[module].add(target)
        lazy[module] -= loading[module]
    return loading, lazy


def _reaches(graph: dict[str, set[str]], start: str, goal: str) -> list[str] | None:
    """A path of imports from start to goal, or None."""
    seen, todo = {start}, [[start]]
    while todo:
        path = todo.pop()
        for nxt in sorted(graph.get(path[-1], ())):
            if nxt == goal:
                return [*path, nxt]
            if nxt not in seen:
                seen.add(nxt)
                todo.append([*path, nxt])
    return None


def find_circles(loading: dict[str, set[str]], lazy: dict[str, set[str]]) -> list[str]:
    """Every import (made when a module loads, or inside a function) that another chain of
    imports leads back from: a circle, the lazy imports counted with the others."""
    every = {m: loading.get(m, set()) | lazy.get(m, set()) for m in {*loading, *lazy}}
    circles = []
    for module, targets in every.items():
        for target in sorted(targets):
            back = _reaches(every, target, module)
            if back:
                how = "(in a function)" if target in lazy.get(module, ()) else ""
                circles.append(f"{module} -{how}-> " + " -> ".join(back))
    return sorted(circles)


def test_no_import_runs_in_a_circle() -> None:
    """No circle of imports, counting those made inside functions: an import made where it
    is used (start-up time needs those) must still point down the floors."""
    circles = find_circles(*import_graphs())
    assert circles == [], "imports run in a circle:\n" + "\n".join(circles)


def test_the_circle_check_sees_a_circle_closed_in_a_function() -> None:
    loading = {"a": {"b"}, "b": set()}
    assert find_circles(loading, {"b": {"a"}}) == ["a --> b -> a", "b -(in a function)-> a -> b"]
    assert find_circles(loading, {"a": {"b"}}) == []


# The floors of the house, bottom to top (the README's package map): a module imports only
# from its own floor or those below, when it loads or inside a function. A module is named
# here by itself or by its package.
FLOORS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "vocabulary: the data model, the key grammar and declarations, bounded input",
        (
            "gpudiag",
            "gpudiag.model",
            "gpudiag.atomic",
            "gpudiag.textparse",
            "gpudiag.tomlcompat",
            "gpudiag.inputs",
            "gpudiag.catalog",
            "gpudiag.hostfs",
            "gpudiag.processes",
            "gpudiag.rule_operators",
            "gpudiag.tui_base",
            "gpudiag.kernels",
            "gpudiag.kernels.plans",
            "gpudiag.kernels.stats",
            "gpudiag.kernels.cpu_loops",
            "gpudiag.kernels.device",
        ),
    ),
    (
        "sources: what makes readings (probes, NVML, importers, kernels, derivations) and "
        "the snapshot file",
        (
            "gpudiag.nvml",
            "gpudiag.probe",
            "gpudiag.probes",
            "gpudiag.importing",
            "gpudiag.kernels.readings",
            "gpudiag.kernels.stream",
            "gpudiag.kernels.gemm",
            "gpudiag.kernels.burn",
            "gpudiag.kernels.copies",
            "gpudiag.kernels.allreduce",
            "gpudiag.kernels.conditions",
            "gpudiag.derive",
            "gpudiag.profiles",
            "gpudiag.slurmgres",
            "gpudiag.capture",
            "gpudiag.device_events",
            "gpudiag.snapshot",
            "gpudiag.upgrade",
            "gpudiag.fleet.records",
            "gpudiag.telemetry.sampler",
            "gpudiag.telemetry.readings",
        ),
    ),
    ("the catalog of what gpudiag ships, assembled from the sources", ("gpudiag.shipped",)),
    (
        "judging and reporting: rules, sessions, diff, fleet, output formats",
        (
            "gpudiag.rulefile",
            "gpudiag.ruleengine",
            "gpudiag.session",
            "gpudiag.diff",
            "gpudiag.diff_keys",
            "gpudiag.diff_kernels",
            "gpudiag.redact",
            "gpudiag.output",
            "gpudiag.health",
            "gpudiag.telemetry",
            "gpudiag.watch",
            "gpudiag.run_report",
            "gpudiag.demo",
            "gpudiag.views",
            "gpudiag.kernels.runner",
            "gpudiag.fleet",
        ),
    ),
    (
        "screens: the TUIs",
        ("gpudiag.tui", "gpudiag.panes", "gpudiag.tui_diff", "gpudiag.fleet.screen"),
    ),
    ("commands: one module per subcommand", ("gpudiag.commands",)),
    (
        "the command line and its entry points",
        ("gpudiag.cli", "gpudiag.cli_parser", "gpudiag.entry", "gpudiag.__main__"),
    ),
)


def floor_of(module: str) -> int | None:
    """The floor a module stands on: the longest name in FLOORS that is it or its package."""
    best: tuple[int, int] | None = None
    for number, (_, names) in enumerate(FLOORS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and (
                best is None or len(name) > best[1]
            ):
                best = (number, len(name))
    return None if best is None else best[0]


def test_every_module_stands_on_a_floor() -> None:
    assert sorted(m for m in _module_files() if floor_of(m) is None) == []


def test_no_import_runs_back_up_a_floor() -> None:
    loading, lazy = import_graphs()
    upward = sorted(
        f"{module} (floor {floor_of(module)}) imports {target} (floor {floor_of(target)})"
        for graph in (loading, lazy)
        for module, targets in graph.items()
        for target in targets
        if (floor_of(target) or 0) > (floor_of(module) or 0)
    )
    assert upward == [], "imports run back up:\n" + "\n".join(upward)
