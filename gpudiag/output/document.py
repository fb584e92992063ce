"""The snapshot itself, in TOML (the default) or JSON: one code path, gpudiag/snapshot.py's
`dumps`, which `load` reads back."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from gpudiag.model import Snapshot

if TYPE_CHECKING:
    from gpudiag.rulefile import Rule


def render(snapshot: Snapshot, fmt: str, rules: Sequence[Rule] = ()) -> str:
    """The registry's entry (gpudiag/output/__init__.py): the snapshot as `fmt`, toml or
    json."""
    from gpudiag.snapshot import dumps

    return dumps(snapshot, as_json=fmt == "json")
