"""TOML reading on every supported Python: `tomllib` from 3.11, `tomli` before."""

from __future__ import annotations

import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

TOMLDecodeError = tomllib.TOMLDecodeError
loads = tomllib.loads

__all__ = ["TOMLDecodeError", "loads"]
