"""`gpudiag capture OUT`: a node, recorded, and `gpudiag --replay CAPTURE`: that node again.
(The command's arguments and its run: gpudiag/commands/capture.py.)

A capture records what the probes asked of the node, through its two seams and nothing
else: every NVML call with its result or error (`RecordingBackend`, in the replay format
of gpudiag/nvml.py), and every host file, directory listing, link, glob and command output
(`RecordingHostFS`: dmidecode, the kernel log or journalctl, py-cpuinfo on an Arm node).
`--replay` answers the same questions from the file (`CapturedHostFS` and a
`ReplayBackend`), so today's probes and rules judge the node as it was.
`--samples N --interval S` adds N-1 more recordings of the GPU probe's NVML calls (the
volatile readings) under `samples`; `--replay` probes the first. Each recording also
holds the GPUs' performance counter window (GPM; gpudiag/commands/capture.py's
CounterWindows): the first's spans the probing, each later one the interval since the
one before, so that `gpudiag --replay CAPTURE watch --explain` judges them again.
`--redact` applies the snapshot redaction to the capture.

Capture file, JSON::

    {"format": "gpudiag-capture", "version": 1, "created": "...", "gpudiag_version": "...",
     "live": true, "root_user": true,
     "nvml": {<an NVML replay: init, system, devices>},
     "host": {"files": {"/proc/cpuinfo": {"text": "..."} | {"base64": "..."}
                                       | {"status": "missing", "reason": "..."}},
              "listdir": {path: [names]}, "glob": {pattern: [paths]},
              "exists": {path: bool}, "realpath": {path: path | null},
              "outputs": {name: <what the command gave>}},
     "samples": [{"seconds": 1.0, "nvml": {...}}]}

This is its own file format with its own version, not a snapshot. Capturing has never
run on a GPU node: it is tested through the real pynvml against the C stand-in
libnvidia-ml (tests/nvml_standin/, not a GPU) on host trees. `gpudiag --replay CAPTURE
watch` prints the recorded samples in order (`recorded_samples`).
"""

from __future__ import annotations

import base64
import binascii
import json
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from gpudiag import __version__, inputs
from gpudiag.hostfs import FileText, HostFS, source_name
from gpudiag.model import ReadingStatus
from gpudiag.nvml import Nvml, NvmlBackend, NvmlError, ReplayBackend, ReplayError

FORMAT = "gpudiag-capture"
VERSION = 1
# A sample's time after the first: --samples at most --interval 3600 apart, bounded so
# that a damaged capture's 1e308 is refused, never an overflow further on
MAX_SAMPLE_SECONDS = 366 * 24 * 3600.0


class CaptureError(Exception):
    """A capture file that cannot be used; str() is the one-line message."""


class RecordingBackend:
    """An NVML backend that records every call's result or error, in the replay format."""

    def __init__(self, backend: NvmlBackend) -> None:
        self.backend = backend
        self.description = backend.description
        self._lock = threading.Lock()
        self.replay: dict[str, Any] = {"system": {}, "devices": []}
        binding = getattr(backend, "binding", None)
        if binding is not None:
            self.replay["binding"] = binding

    @property
    def binding(self) -> str | None:
        """The recorded backend's nvidia-ml-py version (None for a replay)."""
        return self.replay.get("binding")

    def init(self) -> None:
        try:
            self.backend.init()
        except NvmlError as exc:
            self.replay["init"] = _error(exc)
            raise

    def shutdown(self) -> None:
        self.backend.shutdown()

    def call(self, function: str, device: int | None, *args: int) -> Any:
        try:
            result: Any = self.backend.call(function, device, *args)
            self._record(function, device, args, result)
            return result
        except NvmlError as exc:
            self._record(function, device, args, _error(exc))
            raise

    def _record(self, function: str, device: int | None, args: tuple[int, ...], value: Any) -> None:
        with self._lock:
            if device is None:
                table = self.replay["system"]
            else:
                devices = self.replay["devices"]
                while len(devices) <= device:
                    devices.append({})
                table = devices[device]
            if args:
                calls = table.setdefault(function, {})
                if isinstance(calls, dict) and "error" not in calls:
                    calls[",".join(str(a) for a in args)] = value
            else:
                table[function] = value


def _error(exc: NvmlError) -> dict[str, str]:
    return {"error": exc.code, **({"detail": exc.detail} if exc.detail else {})}


class RecordingHostFS(HostFS):
    """The host as it is, every answer recorded."""

    def __init__(self, host: HostFS) -> None:
        super().__init__(host.root, host.is_root_user)
        self.record: dict[str, dict[str, Any]] = {
            "files": {},
            "listdir": {},
            "glob": {},
            "exists": {},
            "realpath": {},
            "outputs": {},
        }

    def read(self, host_path: str, max_bytes: int = 4 * 1024 * 1024) -> FileText:
        result = super().read(host_path, max_bytes)
        entry: dict[str, Any]
        if result.data is not None:
            try:
                entry = {"text": result.data.decode("utf-8")}
            except UnicodeDecodeError:
                entry = {"base64": base64.b64encode(result.data).decode("ascii")}
        else:
            entry = {"status": result.status.value, "reason": result.reason}
        self.record["files"][host_path] = entry
        return result

    def listdir(self, host_path: str) -> list[str]:
        names = super().listdir(host_path)
        self.record["listdir"][host_path] = names
        return names

    def glob(self, host_pattern: str) -> list[str]:
        paths = super().glob(host_pattern)
        self.record["glob"][host_pattern] = paths
        return paths

    def exists(self, host_path: str) -> bool:
        found = super().exists(host_path)
        self.record["exists"][host_path] = found
        return found

    def realpath(self, host_path: str) -> str | None:
        real = super().realpath(host_path)
        self.record["realpath"][host_path] = real
        return real

    def output(self, name: str, produce: Callable[[], Any]) -> Any:
        value = json.loads(json.dumps(produce()))  # plain data, as a replay gives it back
        self.record["outputs"][name] = value
        return value


class CapturedHostFS(HostFS):
    """A recorded host: every answer from the capture; what it did not record is absent."""

    def __init__(self, record: dict[str, Any], live: bool, root_user: bool) -> None:
        super().__init__("/", root_user)
        self.is_live = live  # as the captured node was: the probes behave as they did there
        self.is_this_machine = False  # the files are the captured node's, beside its NVML
        self.record = record

    def read(self, host_path: str, max_bytes: int = 4 * 1024 * 1024) -> FileText:
        source = source_name(host_path)
        entry = self.record["files"].get(host_path)
        if entry is None:
            return FileText(
                host_path, source, None, ReadingStatus.MISSING, f"{host_path} not in the capture"
            )
        if "status" in entry:
            return FileText(
                host_path, source, None, ReadingStatus(entry["status"]), entry["reason"]
            )
        if "base64" in entry:
            data = base64.b64decode(entry["base64"])
        else:
            data = entry["text"].encode("utf-8")
        data = data[:max_bytes]
        text = inputs.printable(data.decode("utf-8", errors="replace"))  # as HostFS.read
        return FileText(host_path, source, text, data=data)

    def listdir(self, host_path: str) -> list[str]:
        return list(self.record["listdir"].get(host_path, []))

    def glob(self, host_pattern: str) -> list[str]:
        return list(self.record["glob"].get(host_pattern, []))

    def exists(self, host_path: str) -> bool:
        return bool(self.record["exists"].get(host_path, False))

    def realpath(self, host_path: str) -> str | None:
        return self.record["realpath"].get(host_path)

    def path(self, host_path: str) -> Path:
        raise ValueError(f"a capture holds no files on disk ({host_path})")

    def output(self, name: str, produce: Callable[[], Any]) -> Any:
        if name not in self.record["outputs"]:
            raise ValueError(f"{name!r} was not recorded in the capture")
        return self.record["outputs"][name]


def replay_data(nvml: dict[str, Any], description: str) -> dict[str, Any]:
    """A recorded NVML section as a complete replay."""
    return {"format": "gpudiag-nvml-replay", "version": 1, "description": description, **nvml}


def record(
    host: HostFS,
    nvml: Nvml,
    run: Callable[[HostFS, Nvml], Any],
    samples: int = 1,
    interval: float = 1.0,
    sample: Callable[[Nvml], None] | None = None,
) -> tuple[dict[str, Any], Any]:
    """Record the node while `run(host, nvml)` probes it (its result is returned beside the
    capture), then `samples - 1` more NVML recordings by `sample(nvml)`, `interval` apart."""
    recording_host = RecordingHostFS(host)
    recorder = RecordingBackend(nvml.backend)
    result = run(recording_host, Nvml(recorder))
    capture: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "created": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "gpudiag_version": __version__,
        "live": host.is_live,
        "root_user": host.is_root_user,
        "nvml": recorder.replay,
        "host": recording_host.record,
        "samples": [],
    }
    started = time.monotonic()
    for _ in range(samples - 1):
        time.sleep(interval)
        again = RecordingBackend(nvml.backend)
        if sample is not None:
            sample(Nvml(again))
        capture["samples"].append(
            {"seconds": round(time.monotonic() - started, 3), "nvml": again.replay}
        )
    return capture, result


def save(capture: dict[str, Any], path: Path) -> None:
    """Write the capture atomically (JSON)."""
    from gpudiag.atomic import write_atomic  # loaded by the command that writes

    def write(stream: IO[str]) -> None:
        json.dump(capture, stream, separators=(",", ":"))

    write_atomic(path, write)


def load(path: str | Path) -> tuple[CapturedHostFS, Nvml, dict[str, Any]]:
    """The host and NVML of a capture file; raises CaptureError with a one-line reason."""
    name = str(path)
    # the one bounded reader: a regular file only (a FIFO or /dev/zero is refused, never
    # read until memory runs out), at most --max-input (256 MiB unless raised); NaN,
    # infinity, deep nesting and oversized integers refused as in every loader; gzip
    # (x.capture.json.gz) unpacked, bounded the same way; every string made printable
    try:
        text = inputs.read_text(path, "a gpudiag capture", gzip_ok=True)
        data = _guarded(inputs.parse_data(text, name, keep_controls=True))
    except inputs.InputError as exc:
        raise CaptureError(str(exc)) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CaptureError(f"{name}: not a gpudiag capture (format must be '{FORMAT}')")
    if data.get("version") != VERSION:
        raise CaptureError(f"{name}: capture version {data.get('version')!r} is not supported")
    host = data.get("host")
    keys = ("files", "listdir", "glob", "exists", "realpath", "outputs")
    if not isinstance(host, dict) or not all(isinstance(host.get(k), dict) for k in keys):
        raise CaptureError(f"{name}: the capture's host section is damaged")
    if not isinstance(data.get("nvml"), dict):
        raise CaptureError(f"{name}: the capture has no nvml section")
    try:
        backend = ReplayBackend(
            replay_data(data["nvml"], f"captured {data.get('created', '')}"), name
        )
    except ReplayError as exc:
        raise CaptureError(str(exc)) from None
    _check_host(host, name)
    hostfs = CapturedHostFS(host, bool(data.get("live")), bool(data.get("root_user")))
    return hostfs, Nvml(backend), data


def _guarded(data: Any) -> Any:
    """Every string of a parsed capture printable, but a host file's recorded text: that
    is the file's bytes, which `CapturedHostFS.read` guards as `HostFS.read` guards a
    live file's (the probes parse the text, the raw bytes stay as read)."""
    host = data.get("host") if isinstance(data, dict) else None
    files = host.get("files") if isinstance(host, dict) else None
    raw: dict[str, str] = {}
    if isinstance(files, dict):
        raw = {
            path: entry["text"]
            for path, entry in files.items()
            if isinstance(entry, dict) and isinstance(entry.get("text"), str)
        }
    data = inputs.printable_data(data)
    if raw:
        for path, text in raw.items():
            data["host"]["files"][inputs.printable(path)]["text"] = text
    return data


def recorded_samples(data: dict[str, Any]) -> list[tuple[float, Nvml]]:
    """A loaded capture's samples in order, each (its time, the NVML it recorded): the
    first is the probe's recording (at `created`), the others `samples`, each `seconds`
    after the first. A GPU whose every recorded call failed with GpuIsLost (the probe
    stops at the first) answers every call so, as a lost GPU does. Raises CaptureError
    for a damaged samples section."""
    try:
        created = datetime.strptime(str(data.get("created")), "%Y-%m-%dT%H:%M:%SZ")
        start = created.replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        raise CaptureError("the capture's creation time is damaged") from None
    samples = data.get("samples", [])
    if not isinstance(samples, list):
        raise CaptureError("the capture's samples section is damaged")
    series = []
    for number, sample in enumerate([{"seconds": 0.0, "nvml": data["nvml"]}, *samples], 1):
        seconds = sample.get("seconds") if isinstance(sample, dict) else None
        if (
            not isinstance(seconds, (int, float))
            or isinstance(seconds, bool)
            or not 0 <= seconds <= MAX_SAMPLE_SECONDS
            or not isinstance(sample.get("nvml"), dict)
        ):
            raise CaptureError(f"the capture's sample {number} is damaged")
        recording = dict(sample["nvml"])
        if isinstance(recording.get("devices"), list):
            recording["devices"] = [_lost_or_as_recorded(d) for d in recording["devices"]]
        try:
            backend = ReplayBackend(replay_data(recording, f"sample {number}"), "capture")
        except ReplayError as exc:
            raise CaptureError(str(exc)) from None
        series.append((start + float(seconds), Nvml(backend)))
    return series


def _lost_or_as_recorded(device: Any) -> Any:
    lost = {"error": "GpuIsLost"}
    if (
        isinstance(device, dict)
        and device
        and all(isinstance(v, dict) and v.get("error") == "GpuIsLost" for v in device.values())
    ):
        return {"all_calls": lost}
    return device


def _check_host(host: dict[str, Any], name: str) -> None:
    """Every host record of the shape CapturedHostFS answers from, or CaptureError naming
    the first that is not (a damaged capture is refused whole, never half-read)."""

    def damaged(kind: str, key: str, why: str) -> CaptureError:
        return CaptureError(f"{name}: the capture's {kind} record of {key!r} is damaged ({why})")

    statuses = {s.value for s in ReadingStatus}
    for path, entry in host["files"].items():
        if not isinstance(entry, dict):
            raise damaged("file", path, "not a table")
        if "status" in entry:
            status = entry["status"]
            if not isinstance(status, str) or status not in statuses:
                raise damaged("file", path, "a status and a reason are expected")
            if not isinstance(entry.get("reason"), str):
                raise damaged("file", path, "a status and a reason are expected")
        elif "base64" in entry:
            try:
                base64.b64decode(str(entry["base64"]), validate=True)
            except (binascii.Error, ValueError):
                raise damaged("file", path, "not base64") from None
        elif not isinstance(entry.get("text"), str):
            raise damaged("file", path, "no text")
    for kind in ("listdir", "glob"):
        for key, names in host[kind].items():
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise damaged(kind, key, "a list of names is expected")
    for key, value in host["exists"].items():
        if not isinstance(value, bool):
            raise damaged("exists", key, "true or false is expected")
    for key, value in host["realpath"].items():
        if value is not None and not isinstance(value, str):
            raise damaged("realpath", key, "a path is expected")
