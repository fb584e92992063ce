"""The CPU STREAM loops compiled with Numba: one fused pass per operation, as a C loop
would run it, and the GIL released so that gpudiag's own pinned threads run them side by
side. NumPy cannot fuse `a = b + s * c` into one pass: its blocked form moves the same
bytes in two passes per block, well short of a C OpenMP triad (benchmarks/cpu_triad.py
measures both beside C in one run; the README gives the latest figures).

`LOOPS` is None where Numba cannot be imported (a platform without its wheels); the
stream runner then falls back to NumPy in blocks and records which engine ran.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

LOOPS: Any = None
UNAVAILABLE = ""


def _copy(a: Any, c: Any) -> None:
    for i in range(a.shape[0]):
        c[i] = a[i]


def _scale(b: Any, c: Any, scalar: Any) -> None:
    for i in range(c.shape[0]):
        b[i] = scalar * c[i]


def _add(a: Any, b: Any, c: Any) -> None:
    for i in range(a.shape[0]):
        c[i] = a[i] + b[i]


def _triad(a: Any, b: Any, c: Any, scalar: Any) -> None:
    for i in range(a.shape[0]):
        a[i] = b[i] + scalar * c[i]


def _dot(a: Any, b: Any) -> float:
    total = 0.0  # accumulated in float64, FP32 arrays included
    for i in range(a.shape[0]):
        total += a[i] * b[i]
    return total


class Loops:
    """copy, scale, add, triad and dot over whole (sub)arrays, compiled on first use and
    cached on disk (Numba's cache, next to this file or in the user's cache directory) so
    that later runs skip the compile; where neither is writable, compiled every run."""

    def __init__(self, jit: Callable[..., Any]) -> None:
        def compiled(function: Callable[..., Any], **options: Any) -> Any:
            try:
                return jit(nogil=True, cache=True, boundscheck=False, **options)(function)
            except RuntimeError:  # Numba: "cannot cache ...: no locator available"
                return jit(nogil=True, cache=False, boundscheck=False, **options)(function)

        self.copy = compiled(_copy)
        self.scale = compiled(_scale)
        self.add = compiled(_add)
        self.triad = compiled(_triad)
        self.dot = compiled(_dot, fastmath=True)


try:
    import numba
except ImportError as exc:  # numba ships wheels for x86_64 and aarch64 only
    UNAVAILABLE = (
        f"numba is not importable ({exc}): pip install 'gpudiag[cpu-kernels]'"
        " for the compiled loops (NumPy runs them otherwise)"
    )
else:
    LOOPS = Loops(numba.njit)
