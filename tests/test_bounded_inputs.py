"""Issue 27, points 9-12 and 14: one validator for every number option (finite, in
range, else a usage error, exit 3); capture records with a status of the wrong type or
a sample time of 1e308 refused; the Parquet fleet entry capped at what a fleet needs;
--redact-key's limit said as it is; a gzip capture replayed."""

from __future__ import annotations

import argparse
import gzip
import json
import zlib
from pathlib import Path

import polars as pl
import pytest

from gpudiag import cli, inputs
from gpudiag.fleet.parquet import METADATA_KEY, read_parquet_fleet
from gpudiag.snapshot import SnapshotError

from conftest import FIXTURES, REPO, run_cli

TREE = str(FIXTURES / "host-basic")
DEMO_CAPTURE = REPO / "snapshots" / "demo-hgx-h100-faulty.capture.json"


def _main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    inputs.set_limit(inputs.DEFAULT_MAX_INPUT)
    return code, out + err


BAD_NUMBERS = [
    ["health", "--timeout", "nan"],
    ["health", "--timeout", "inf"],
    ["health", "--timeout", "1e308"],
    ["watch", "--interval", "inf"],
    ["watch", "--interval", "1e308"],
    ["watch", "--interval", "nan"],
    ["watch", "--count", "0"],
    ["fleet", "x", "--threshold", "nan"],
    ["fleet", "x", "--workers", "0"],
    ["baseline", "x", "-o", "y.toml", "--quantile", "nan"],
    ["baseline", "x", "-o", "y.toml", "--margin", "inf"],
    ["run", "burn", "--seconds", "1e308"],
    ["run", "stream", "--seconds", "nan"],
    ["run", "stream", "--until-confident", "inf"],
    ["run", "stream", "--trials", "1"],
    ["run", "stream", "--trials", "9" * 5000],
    ["--timeout-scale", "nan", "--export", "-"],
    ["--timeout-scale", "1e308", "--export", "-"],
    ["capture", "out.json", "--interval", "nan"],
    ["capture", "out.json", "--samples", "0"],
]


@pytest.mark.parametrize("argv", BAD_NUMBERS, ids=[" ".join(a)[:40] for a in BAD_NUMBERS])
def test_every_number_option_is_finite_and_in_range(argv: list[str], capsys) -> None:
    code, text = _main(capsys, "--root", TREE, *argv)
    assert code == 3, text
    assert "Traceback" not in text and "internal error" not in text, text
    assert len(text.strip().splitlines()) == 1, text
    assert "must be a" in text or "not a whole number" in text, text


def test_the_validator() -> None:
    parse = inputs.number_option(0, 10, above=True)
    assert parse("2.5") == 2.5 and parse("10") == 10.0
    for bad in ("0", "-1", "10.01", "nan", "inf", "-inf", "1e308", "x", ""):
        with pytest.raises(argparse.ArgumentTypeError, match=r"must be|not a"):
            parse(bad)
    assert inputs.number_option(1, 3, integer=True)("3") == 3
    with pytest.raises(ValueError):
        inputs.check_number(True, 0, 10)


def _capture(tmp_path: Path, change) -> Path:
    data = json.loads(DEMO_CAPTURE.read_text())
    change(data)
    path = tmp_path / "c.capture.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("status", [["missing"], {"a": 1}, 3, None])
def test_a_capture_status_of_the_wrong_type_is_refused(tmp_path: Path, capsys, status) -> None:
    def change(data: dict) -> None:
        data["host"]["files"]["/etc/hostname"] = {"status": status, "reason": "x"}

    path = _capture(tmp_path, change)
    code, text = _main(capsys, "--replay", str(path), "--export", "-")
    assert code == 3 and "Traceback" not in text and "internal error" not in text, text
    assert "/etc/hostname" in text and "damaged" in text, text


@pytest.mark.parametrize("seconds", [1e308, -1.0, True])
def test_a_capture_sample_time_out_of_range_is_refused(tmp_path: Path, capsys, seconds) -> None:
    def change(data: dict) -> None:
        data["samples"] = [{"seconds": seconds, "nvml": data["nvml"]}]

    path = _capture(tmp_path, change)
    code, text = _main(capsys, "--replay", str(path), "watch", "--count", "2")
    assert code == 3 and "Traceback" not in text and "internal error" not in text, text
    assert "sample 2 is damaged" in text, text


def test_a_gzip_capture_replays(tmp_path: Path) -> None:
    packed = tmp_path / "node.capture.json.gz"
    packed.write_bytes(gzip.compress(DEMO_CAPTURE.read_bytes()))
    plain = run_cli("--replay", str(DEMO_CAPTURE), "--export", "-", "--format", "json")
    result = run_cli("--replay", str(packed), "--export", "-", "--format", "json")
    assert result.returncode == plain.returncode == 2, result.stderr
    a, b = json.loads(plain.stdout), json.loads(result.stdout)
    for snap in (a, b):
        snap.pop("created"), snap.pop("command_line")
        for probe in snap["probes"]:
            probe.pop("duration_s")
    assert a == b


def test_parquet_metadata_bomb_is_refused_early(tmp_path: Path) -> None:
    """An entry that inflates to 128 MiB from about 128 KiB: refused at 16 MiB."""
    import base64

    packer = zlib.compressobj(9)
    chunk = b" " * 2**20
    packed = b"".join(packer.compress(chunk) for _ in range(128)) + packer.flush()
    assert len(packed) < 2**20
    target = tmp_path / "bomb.parquet"
    pl.DataFrame({"node": ["a"], "slot": [0], "value": [1.0]}).write_parquet(
        target, metadata={METADATA_KEY: base64.b64encode(packed).decode()}
    )
    with pytest.raises(SnapshotError, match="inflates past 16 MiB"):
        read_parquet_fleet(target)


def test_redact_key_limit_is_said_as_it_is(tmp_path: Path, capsys) -> None:
    key = tmp_path / "key"
    key.write_bytes(b"k" * 5000)
    code, text = _main(
        capsys, "--redact", "--redact-key", str(key), "--root", TREE, "--export", "-"
    )
    assert code == 3, text
    assert "larger than 4 KiB" in text and "--max-input" not in text, text
