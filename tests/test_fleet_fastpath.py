"""The fleet's fast JSON path accepts only what the snapshot loader accepts, and reads it
the same: a good snapshot mutated at random (a field removed, retyped, added; a value
replaced by null, a nested list, NaN, a huge number, another status) is read by a reader
that has already seen the good one, so the fast path's own checks decide, not the loader
it consults for each new shape."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpudiag.fleet.load import _Reader, _value, as_kernel_result
from gpudiag.model import SCHEMA_VERSION
from gpudiag.snapshot import SnapshotError, loads

GOOD: dict[str, Any] = {
    "schema_version": SCHEMA_VERSION,  # a schema change that moves fields needs GOOD updated
    "gpudiag_version": "0.1.0",
    "host": "node1",
    "created": "2026-11-01T00:00:00Z",
    "command_line": ["gpudiag", "--export", "x.json"],
    "probes": [
        {
            "name": "gpu",
            "status": "ok",
            "duration_s": 0.5,
            "readings": [
                {"key": "gpu.0.power.limit", "value": 700.0, "unit": "W", "status": "ok"},
                {"key": "gpu.0.pcie.link_width", "value": 16, "unit": "lanes", "status": "ok"},
                {"key": "gpu.0.name", "value": "H100", "source": "nvml:x", "status": "ok"},
                {"key": "gpu.0.throttle_reasons", "value": ["GpuIdle"], "status": "ok"},
                {"key": "gpu.0.persistence_mode", "value": True, "status": "ok"},
                {"key": "gpu.0.vbios", "status": "missing", "reason": "not read"},
            ],
        },
        {"name": "host", "title": "Host", "status": "ok", "duration_s": 1, "readings": []},
    ],
    "kernels": [
        {
            "kernel": "stream",
            "device": "gpu0",
            "metric": "triad",
            "unit": "GB/s",
            "status": "ok",
            "samples": [3000.0, 3001.5, 2999],
            "params": {"dtype": "fp64", "trials": 3},
            "stats": {
                "count": 3,
                "median": 3000.0,
                "minimum": 2999.0,
                "maximum": 3001.5,
                "mean": 3000.2,
                "cv": 0.001,
                "ci95_low": 2999.0,
                "ci95_high": 3001.5,
            },
        }
    ],
    "findings": [
        {
            "rule_id": "GPU016",
            "severity": "warning",
            "subject": "GPU 0",
            "message": "m",
            "action": "drain",
            "evidence": [{"key": "gpu.0.power.limit", "value": 700.0, "status": "ok"}],
        }
    ],
    "end": {"probes": 2, "readings": 6, "kernels": 1, "findings": 1},
}

ODD_VALUES = st.sampled_from(
    [None, True, 0, -1, 2**70, 1.5, "", "x", "ok", "error", [], [1], [[1]], [None], {}, {"a": 1}]
)


def _odd(draw: st.DrawFn) -> Any:
    """An odd value, a fresh copy (mutating a shared one would leak between examples)."""
    return copy.deepcopy(draw(ODD_VALUES))


def _containers(data: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths of every dict and list inside `data`."""
    found = [path]
    items = data.items() if isinstance(data, dict) else enumerate(data)
    for key, value in items:
        if isinstance(value, (dict, list)):
            found.extend(_containers(value, (*path, key)))
    return found


def _at(data: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        data = data[key]
    return data


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    data = copy.deepcopy(GOOD)
    for _ in range(draw(st.integers(1, 2))):
        target = _at(data, draw(st.sampled_from(_containers(data))))
        if isinstance(target, dict):
            keys = sorted(target)
            action = draw(st.sampled_from(["delete", "set", "add"] if keys else ["add"]))
            if action == "delete":
                del target[draw(st.sampled_from(keys))]
            elif action == "set":
                target[draw(st.sampled_from(keys))] = _odd(draw)
            else:
                # a fresh copy here too: the shared one, mutated in a later step, could come
                # to hold itself, and every later example would recurse forever
                target[draw(st.sampled_from(["colour", "value", "unit", "stats"]))] = _odd(draw)
        elif target:
            index = draw(st.integers(0, len(target) - 1))
            if draw(st.booleans()):
                target[index] = _odd(draw)
            else:
                del target[index]
    text = msgspec.json.encode(data)
    if draw(st.booleans()):  # NaN and infinity, which JSON itself cannot hold
        text = text.replace(b"3001.5", draw(st.sampled_from([b"NaN", b"1e999", b"-Infinity"])))
    return text


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=mutated())
def test_the_fast_path_accepts_only_what_the_loader_accepts(raw: bytes) -> None:
    reader = _Reader()
    assert reader._fast("good.json", msgspec.json.encode(GOOD)) is not None
    fast = reader._fast("mutated.json", raw)
    try:
        snapshot = loads(raw.decode(), "mutated.json")
    except SnapshotError:
        assert fast is None, "the fast path took a file the loader refuses"
        return
    if fast is None:
        return  # the loader decides (a new shape it refused to vouch for): not wrong
    assert fast.host == snapshot.host and fast.created == snapshot.created
    layout = reader.layouts[fast.layout]
    by_key = snapshot.readings_by_key
    assert layout.keys == tuple(by_key)
    config = next(c for (lay, c), i in reader.configs.items() if i == fast.config)
    assert config == tuple(_value(by_key[layout.keys[p]].value) for p in layout.config)
    assert tuple(map(as_kernel_result, fast.kernels)) == snapshot.kernels
    assert fast.findings == tuple(
        (f.rule_id, f.severity.value, f.subject) for f in snapshot.findings
    )


def test_a_good_file_takes_the_fast_path(tmp_path: Path) -> None:
    reader = _Reader()
    raw = msgspec.json.encode(GOOD)
    run = reader._fast("good.json", raw)
    assert run is not None and run.kernel_values[0].key == "gpu.0.kernel.stream.triad.fp64"
    assert tuple(map(as_kernel_result, run.kernels)) == loads(raw.decode()).kernels


def test_a_real_export_takes_the_fast_path(tmp_path: Path) -> None:
    """What `gpudiag --export x.json` writes today (schema 2: every finding's action, the
    not-applicable ones too) is read by the fast path, not refused into the slow one."""
    from gpudiag.demo import demo_node
    from gpudiag.snapshot import save

    target = tmp_path / "node.json"
    save(demo_node("faulty").snapshot(), target)
    run = _Reader()._fast("node.json", target.read_bytes())
    assert run is not None
    assert run.findings == tuple(
        (f.rule_id, f.severity.value, f.subject) for f in loads(target.read_text()).findings
    )


def test_a_kernel_parameter_past_64_bits_goes_to_the_loader(tmp_path: Path) -> None:
    """A parameter of 2**70 (JSON allows it; msgpack, which packs a node's kernel results,
    does not): the fast path leaves the file to the loader, and `gpudiag fleet` reports
    the node, where it stopped with an internal error before (found by the test above)."""
    from conftest import run_cli

    data = copy.deepcopy(GOOD)
    data["kernels"][0]["params"]["trials"] = 2**70
    raw = msgspec.json.encode(data)
    assert _Reader()._fast("big.json", raw) is None
    (tmp_path / "big.json").write_bytes(raw)
    result = run_cli("fleet", str(tmp_path), "--format", "json")
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert msgspec.json.decode(result.stdout)["nodes"] == 1
