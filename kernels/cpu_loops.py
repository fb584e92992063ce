"""The CPU STREAM loops compiled with Numba: one fused pass per operation, as a C loop
would run it, and the GIL released so that gpudiag's own pinned threads run them side by
side. NumPy cannot fuse `a = b + s * c` into one pass: its blocked form moves the same
bytes in two passes per block and reached about 62% of a C OpenMP triad on the
development VM (benchmarks/cpu_triad.py), against the issue's target of 90%.

`LOOPS` is None where Numba cannot be imported (a platform without its wheels); the
stream runner then falls back to NumPy in blocks and records which engine ran.
"""

from __future__ import annotations

from typing import Any

LOOPS: Any = None
UNAVAILABLE = ""

try:
    import numba
except ImportError as exc:  # numba ships wheels for x86_64 and aarch64 only
    UNAVAILABLE = f"numba is not importable ({exc})"
else:

    class _Loops:
        """copy, scale, add, triad and dot over whole (sub)arrays, compiled on first use
        and cached on disk (numba's cache) so that later runs skip the compile."""

        @staticmethod
        @numba.njit(nogil=True, cache=True, boundscheck=False)
        def copy(a: Any, c: Any) -> None:
            for i in range(a.shape[0]):
                c[i] = a[i]

        @staticmethod
        @numba.njit(nogil=True, cache=True, boundscheck=False)
        def scale(b: Any, c: Any, scalar: Any) -> None:
            for i in range(c.shape[0]):
                b[i] = scalar * c[i]

        @staticmethod
        @numba.njit(nogil=True, cache=True, boundscheck=False)
        def add(a: Any, b: Any, c: Any) -> None:
            for i in range(a.shape[0]):
                c[i] = a[i] + b[i]

        @staticmethod
        @numba.njit(nogil=True, cache=True, boundscheck=False)
        def triad(a: Any, b: Any, c: Any, scalar: Any) -> None:
            for i in range(a.shape[0]):
                a[i] = b[i] + scalar * c[i]

        @staticmethod
        @numba.njit(nogil=True, cache=True, boundscheck=False, fastmath=True)
        def dot(a: Any, b: Any) -> float:
            total = 0.0  # accumulated in float64, FP32 arrays included
            for i in range(a.shape[0]):
                total += a[i] * b[i]
            return total

    LOOPS = _Loops()
