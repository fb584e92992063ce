"""Issue 27, points 6-8: the Slurm health check when scontrol is missing, not
executable, hangs or answers bytes that are not UTF-8 (one line naming scontrol's
failure, exit 3, nothing drained, the whole check within its 50 s); one node name only
in NodeName=; the settings file read through the bounded input reader. Stand-in
scontrol scripts; the real slurmctld path runs in tests/test_slurm.py."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from gpudiag import cli, health, inputs
from gpudiag.health import HealthError, Slurm, config_arguments

from conftest import FIXTURES

NODE = ["--root", str(FIXTURES / "host-basic"), "--nvml-replay", str(FIXTURES / "replay-2gpu.toml")]


def _script(tmp_path: Path, name: str, body: str, mode: int = 0o755) -> Path:
    path = tmp_path / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(mode)
    return path


def _health(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main([*NODE, "health", "--for", "slurm", "--node", "n1", *args])
    out, err = capsys.readouterr()
    inputs.set_limit(inputs.DEFAULT_MAX_INPUT)
    return code, out, err


def _one_line(code: int, out: str, err: str, expect: str) -> None:
    assert code == 3, (code, out, err)
    assert "Traceback" not in out + err and "internal error" not in out + err, err
    assert out == "" and len(err.strip().splitlines()) == 1, (out, err)
    assert expect in err, err
    assert all(c not in err for c in "\x1b\x07\x9b"), repr(err)


def test_missing_scontrol(capsys) -> None:
    code, out, err = _health(capsys, "--scontrol", "/nonexistent/scontrol")
    _one_line(code, out, err, "scontrol /nonexistent/scontrol: cannot run: No such file")


def test_scontrol_not_executable(tmp_path: Path, capsys) -> None:
    path = _script(tmp_path, "scontrol", "echo State=IDLE", mode=0o644)
    code, out, err = _health(capsys, "--scontrol", str(path))
    _one_line(code, out, err, f"scontrol {path}: cannot run: Permission denied")


def test_scontrol_answering_bytes_not_utf8(tmp_path: Path, capsys) -> None:
    path = _script(tmp_path, "scontrol", r"printf '\377\376\033[2J\033]52;c;eA==\007'")
    code, out, err = _health(capsys, "--scontrol", str(path))
    _one_line(code, out, err, "scontrol show node n1: no State= in")
    failing = _script(tmp_path, "failing", r"printf 'bad \377\033[2J' >&2; exit 1")
    code, out, err = _health(capsys, "--scontrol", str(failing))
    _one_line(code, out, err, "scontrol show node n1: bad")


def test_a_hung_scontrol_is_killed_within_the_budget(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The budget made 6 s here (50 s in use): the check and a hung scontrol (and the
    child it started, which holds its pipes) end within it, in one line."""
    marker = tmp_path / "child-pid"
    path = _script(tmp_path, "scontrol", f"sleep 300 & echo $! > {marker}\nsleep 300")
    monkeypatch.setattr(health, "SLURM_BUDGET_S", 6.0)
    monkeypatch.setattr(health, "SCONTROL_RESERVE_S", 3.0)
    started = time.monotonic()
    code, out, err = _health(capsys, "--scontrol", str(path))
    elapsed = time.monotonic() - started
    _one_line(code, out, err, "scontrol show node n1: no answer within")
    assert elapsed < 6.0 + 4.0, elapsed  # the budget, and the kill's grace
    child = int(marker.read_text())
    time.sleep(0.2)
    status = Path(f"/proc/{child}/status")  # killed with its process group: gone, or a
    if status.exists():  # zombie where this container's init does not reap orphans
        assert "\nState:\tZ" in status.read_text(), status.read_text()[:200]


def test_the_budget_bounds_every_call() -> None:
    cluster = Slurm("n1", "/bin/true", {}, deadline=time.monotonic() - 1)
    with pytest.raises(HealthError, match="show node n1: no time left within the 50 s check"):
        cluster.state()


@pytest.mark.parametrize(
    "node", ["n1,n[2-99]", "n[1-4]", "n1 n2", "ALL", "n1=x", "n1;reboot", "a" * 65]
)
def test_one_node_name_only(tmp_path: Path, capsys, node: str) -> None:
    calls = tmp_path / "calls"
    path = _script(tmp_path, "scontrol", f'echo "$@" >> {calls}; echo State=IDLE')
    code = cli.main([*NODE, "health", "--for", "slurm", "--node", node, "--scontrol", str(path)])
    out, err = capsys.readouterr()
    if node == "ALL":  # a single name Slurm might read as every node: still one name
        assert code != 3 or "node name" not in err
        return
    _one_line(code, out, err, "one Slurm node name is expected")
    assert not calls.exists()  # scontrol never ran


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        (f"timeout = {'9' * 5000}\n", "Exceeds the limit"),
        ("options = " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply"),
        ("timeout = nan\n", "non-finite number"),
        ("timeout = 1e308\n", "timeout must be a finite number above 0 and at most 3600"),
        ("timeout = -1\n", "timeout must be a finite number above 0"),
        ("timeout = 'x'\n", "timeout must be a finite number"),
        ('x = "\\u001b[2J"\n', "unknown key(s) x"),
    ],
    ids=["long-int", "deep", "nan", "1e308", "negative", "string", "escape"],
)
def test_settings_file_is_read_bounded(tmp_path: Path, text: str, expect: str) -> None:
    settings = tmp_path / "slurm-healthcheck.toml"
    settings.write_text(text)
    with pytest.raises(HealthError) as caught:
        config_arguments(settings)
    message = str(caught.value)
    assert expect in message and len(message.splitlines()) == 1, message
    assert len(message) < 400


def test_settings_fifo_and_size_are_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    with pytest.raises(HealthError, match="FIFO"):
        config_arguments(fifo)  # at once: never waits for a writer
    big = tmp_path / "big.toml"
    big.write_text("# x\n" * 20000)
    with pytest.raises(HealthError, match="larger than 64 KiB"):
        config_arguments(big)


def test_settings_through_the_installed_script(tmp_path: Path) -> None:
    import subprocess

    settings = tmp_path / "s.toml"
    settings.write_text(f"timeout = {'9' * 5000}\n")
    script = Path(sys.executable).parent / "gpudiag-slurm-healthcheck"
    result = subprocess.run(
        [str(script), "--config", str(settings)], capture_output=True, text=True, env={}
    )
    assert result.returncode == 3 and "Traceback" not in result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr
