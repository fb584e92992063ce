"""The optional parts of gpudiag and the pip extras that install them (pyproject.toml's
optional-dependencies): a node's install leaves out the fleet's engines (Polars for
Parquet, msgspec, ClusterShell), the compiled CPU loops (numba and llvmlite) and the
monitor's Prometheus client. A command that needs one says, in one line, which extra to
install (exit 3)."""

from __future__ import annotations

import importlib.util

# module -> the extra that installs it
EXTRAS = {
    "polars": "fleet",
    "msgspec": "fleet",
    "ClusterShell": "fleet",
    "fsspec": "fleet",  # a dataset at a URL (fleet/store.py)
    "numba": "cpu-kernels",
    "prometheus_client": "monitor",
}


def _found(module: str) -> bool:
    """Whether MODULE can be imported (found, not loaded: finding it imports nothing)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken or half-removed install
        return False


def missing(what: str, *modules: str) -> str | None:
    """One line saying that WHAT needs the first of MODULES that is not installed and
    which extra installs it, or None when all can be imported."""
    for module in modules:
        if not _found(module):
            return f"{what} needs {module}, not installed: pip install 'gpudiag[{EXTRAS[module]}]'"
    return None
