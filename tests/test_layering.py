"""The core (gpudiag/*.py) does not import the plugins (gpudiag.probes.<module>,
gpudiag.kernels.<module>) when it loads, but for the registries that must list them. What
they share lives in core modules (gpudiag/catalog.py: the key grammar and the declared
readings). An import inside a function (a kernel run, a probe's decoder used on demand)
is not counted: it costs nothing until used."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from conftest import REPO

PLUGIN_PACKAGES = {"gpudiag.probes": REPO / "probes", "gpudiag.kernels": REPO / "kernels"}
# (core file, plugin module) -> why it may import it when it loads
ALLOWED = {
    ("gpudiag/cli.py", "gpudiag.kernels.plans"): (
        "the kernel plan registry: `run`'s kernel choices and the --kernels plan names"
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
    for path in sorted((REPO / "gpudiag").glob("*.py")):
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
