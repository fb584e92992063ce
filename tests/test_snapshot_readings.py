"""A snapshot's readings loaded in one pass (snapshot._plain_reading, then
Reading.checked without __init__): the same reading the slow path (_reading_from, with
Reading(...)'s checks) makes, and None exactly where the slow path refuses the table
(it then says what is wrong)."""

from __future__ import annotations

import itertools
from typing import Any

from gpudiag.model import Reading, ReadingStatus
from gpudiag.snapshot import _plain_reading, _reading_from

VALUES: list[Any] = [
    1, 0, -3, 2.5, float("nan"), float("inf"), True, False, "x", "", [], [1, "a", 2.5],
    [1, [2]], [None], [float("nan")], [{}], {}, None, (1,),
]  # fmt: skip
STATUSES = ["ok", "missing", "error", "bogus", 3]


def _expected(table: dict[str, Any]) -> Reading | None:
    """What the slow path (_reading_from, which says what is wrong) makes of it."""
    try:
        return _reading_from(dict(table), "t")
    except ValueError:
        return None


def test_each_table_loads_as_reading_makes_it_or_is_left_to_the_slow_path() -> None:
    made = 0
    for key, value, status in itertools.product(["gpu.0.x", ""], [*VALUES, "absent"], STATUSES):
        table: dict[str, Any] = {"key": key, "status": status, "unit": "W", "reason": "r"}
        if value != "absent":
            table["value"] = value
        got = _plain_reading(table)
        expected = _expected(table)
        assert (got is None) == (expected is None), table
        if got is None:
            continue
        made += 1
        assert got == expected and repr(got) == repr(expected)
        if not isinstance(got.value, list):
            assert hash(got) == hash(expected)
        assert type(got.status) is ReadingStatus
    assert made >= 12  # not vacuous: every good value with ok, and the failed ones


def test_a_table_of_other_fields_or_types_is_left_to_the_slow_path() -> None:
    good = {"key": "gpu.0.x", "value": 1, "unit": "W", "source": "s", "status": "ok"}
    variants: list[Any] = [
        {**good, "colour": "red"},  # a field a reading does not have
        {k: v for k, v in good.items() if k != "status"},
        {k: v for k, v in good.items() if k != "key"},
        {**good, "unit": 3},
        {**good, "source": None},
        {**good, "reason": ["r"]},
        {**good, "status": ["ok"]},
        {**good, "value": 10**400},
        {**good, "value": -2e300},
        [good],
        "gpu.0.x",
    ]
    for table in variants:
        assert _plain_reading(table) is None and _expected(table) is None, table
    assert _plain_reading(good) == _expected(good)


def test_a_plain_reading_is_the_one_reading_makes() -> None:
    """Its fields in Reading's order (its __dict__ is the table merged over the defaults),
    every default filled, the table read left as it was."""
    table = {"status": "missing", "reason": "r", "key": "gpu.0.x"}
    got = _plain_reading(table)
    made = Reading("gpu.0.x", None, status=ReadingStatus.MISSING, reason="r")
    assert got == made and list(vars(got).items()) == list(vars(made).items())
    assert table == {"status": "missing", "reason": "r", "key": "gpu.0.x"}


def test_a_checked_reading_is_frozen() -> None:
    import dataclasses

    import pytest

    reading = Reading.checked("a.b", 1, "", "", ReadingStatus.OK, "")
    with pytest.raises(dataclasses.FrozenInstanceError):
        reading.value = 2  # type: ignore[misc]
    assert dataclasses.replace(reading, value=2).value == 2


def test_with_findings_is_replace_with_the_index_shared() -> None:
    from dataclasses import replace

    from gpudiag.model import Finding, ProbeResult, ProbeStatus, Severity, Snapshot

    readings = (Reading("gpu.0.x", 1), Reading("gpu.1.x", 2))
    snapshot = Snapshot("h", "2026-01-01T00:00:00Z", "v", probes=(
        ProbeResult("p", ProbeStatus.OK, 0.0, readings),
    ))  # fmt: skip
    findings = [Finding("R001", Severity.WARNING, "GPU 0", "t", "m")]
    judged = snapshot.with_findings(findings)
    expected = replace(snapshot, findings=tuple(findings))
    assert judged == expected and repr(judged) == repr(expected)
    assert judged.readings_by_key == expected.readings_by_key == {r.key: r for r in readings}
    assert judged.findings == tuple(findings) and snapshot.findings == ()
    assert judged.reading("gpu.1.x") == readings[1]


def test_a_file_is_read_in_one_call_of_its_size(tmp_path, monkeypatch) -> None:
    """A regular file's bytes come from one read of its size (and one more byte), never
    copied again by a join of 1 MiB chunks; the limit and the empty file as before."""
    import os

    import pytest

    from gpudiag import inputs

    path = tmp_path / "big.json"
    data = b'{"a": "' + b"x" * (3 << 20) + b'"}\n'
    path.write_bytes(data)
    sizes: list[int] = []
    real = os.read

    def counted(fd: int, n: int) -> bytes:
        got = real(fd, n)
        sizes.append(len(got))
        return got

    monkeypatch.setattr(inputs.os, "read", counted)
    assert inputs.read_input(path) == data and sizes == [len(data), 0]
    with pytest.raises(inputs.InputError, match="larger than"):
        inputs.read_input(path, max_bytes=len(data) - 1)
    path.write_bytes(b" \n\t\r\n")
    with pytest.raises(inputs.InputError, match="file is empty"):
        inputs.read_text(path, "a snapshot")
