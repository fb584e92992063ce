"""What `gpudiag monitor` costs: CPU per window of an 8-GPU node and resident memory,
beside a reference in the same run, through the C NVML stand-in (tests/nvml_standin/)
loaded by the real pynvml.

    python benchmarks/monitor_budget.py [--rounds 4000] [--seconds 10]

Target: at most 1% of one core at 1 Hz (10 ms of CPU per window of 8 GPUs) and 50 MB
resident. The reference is a bare NVML sampling loop: the same pynvml calls per GPU
(GPM sample and metrics, SM clock, power, power limit, temperature, clock event reasons)
with nothing done with the answers, in a process of its own. The monitor's figure is a
window taken, judged, kept in the ring and rendered as the Prometheus exposition (what a
scrape or the textfile costs), in another process; its memory is read after `--rounds`
windows (more than the ring holds, so the ring is full; the hour's history, held for its
Parquet file, grows with them). `--seconds S` also runs the
monitor's own loop at 1 Hz for S seconds, its textfile written every window, and reads
the process's CPU over them (the HTTP server thread idle included). The stand-in
answers from memory, its pointer checks off (GPUDIAG_STANDIN_UNCHECKED): the driver's
own cost per call is not in these figures (no GPU here); the difference from the
reference is gpudiag's own.
"""

from __future__ import annotations

if __name__ == "__main__":  # gpudiag as users install it (benchmarks/_wheel.py)
    from _wheel import use_the_wheel

    use_the_wheel()

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GPUS = 8

REFERENCE = """
import json, sys, time
import pynvml
pynvml.nvmlInit()
handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
samples = [[pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()] for _ in handles]
requests = []
for _ in handles:
    r = pynvml.c_nvmlGpmMetricsGet_t()
    r.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    r.numMetrics = 15
    for slot, m in zip(r.metrics, (1, 2, 3, 5, 7, 8, 9, 10, 11, 12, 13, 20, 21, 60, 61)):
        slot.metricId = m
    requests.append(r)
for h, (a, _) in zip(handles, samples):
    pynvml.nvmlGpmSampleGet(h, a)
def window(t):
    for i, h in enumerate(handles):
        a, b = samples[i]  # a: the last sample; b: the next
        pynvml.nvmlGpmSampleGet(h, b)
        requests[i].sample1, requests[i].sample2 = a, b
        samples[i] = [b, a]
        pynvml.nvmlGpmMetricsGet(requests[i])
        pynvml.nvmlDeviceGetClockInfo(h, 1)
        pynvml.nvmlDeviceGetPowerUsage(h)
        pynvml.nvmlDeviceGetEnforcedPowerLimit(h)
        pynvml.nvmlDeviceGetTemperature(h, 0)
        pynvml.nvmlDeviceGetCurrentClocksEventReasons(h)
rounds = int(sys.argv[1])
start = time.process_time()
for t in range(rounds):
    window(t)
cpu = (time.process_time() - start) / rounds
rss = int(next(l.split()[1] for l in open("/proc/self/status") if l.startswith("VmRSS"))) * 1024
print(json.dumps({"cpu": cpu, "rss": rss}))
"""

MONITOR = """
import json, sys, threading, time
from pathlib import Path
from gpudiag.nvml import Nvml, PynvmlBackend
from gpudiag.profiles import load_profiles
from gpudiag.telemetry.history import HourBuffer
from gpudiag.telemetry.monitor import Monitor, Stop, render_textfile, run, serve
from gpudiag.telemetry.verdicts import ceilings_for
peaks = load_profiles()["h100-sxm5"].values
nvml = Nvml(PynvmlBackend())
count = int(nvml.call("nvmlDeviceGetCount"))
history = HourBuffer(Path(sys.argv[4]), "bench")  # the hour's windows, held for Parquet
monitor = Monitor(nvml, count, [ceilings_for(g, peaks, "h100-sxm5") for g in range(count)],
                  lambda line: None, ring=3600, history=history)
rounds, seconds = int(sys.argv[1]), float(sys.argv[2])
monitor.step()
start = time.process_time()
for _ in range(rounds):
    monitor.step()
    render_textfile(monitor)
cpu = (time.process_time() - start) / rounds
rss = int(next(l.split()[1] for l in open("/proc/self/status") if l.startswith("VmRSS"))) * 1024
held = len(history)
share = None
if seconds > 0:  # the monitor's own loop at 1 Hz, with its HTTP endpoint up
    server = serve(monitor, "127.0.0.1", 0)
    stop = Stop()
    timer = threading.Timer(seconds, stop.event.set)
    timer.start()
    begin, cpu0 = time.monotonic(), time.process_time()
    run(monitor, 1.0, None, stop, Path(sys.argv[3]))  # the textfile written every window
    share = (time.process_time() - cpu0) / (time.monotonic() - begin)
    server.shutdown()
print(json.dumps({"cpu": cpu, "rss": rss, "ring": len(monitor.ring), "share": share,
                  "history": held}))
"""


def _child(code: str, env: dict[str, str], *args: str) -> dict[str, float]:
    run = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        check=False,
    )
    if run.returncode != 0:
        sys.exit(f"monitor_budget: a child failed: {run.stderr[-2000:]}")
    return json.loads(run.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4000, help="windows timed")
    parser.add_argument("--seconds", type=float, default=10.0, help="1 Hz run (0: none)")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO / "tests"))
    from standin import build, environment
    from telemetry_traces import WINDOWS, flat, straggler_node

    with tempfile.TemporaryDirectory(prefix="gpudiag-monitor-budget-") as folder:
        work = Path(folder)
        library = build("current", work / "lib")
        (work / "node.flat").write_text(flat(straggler_node()))
        # no PYTHONPATH: the children import the wheel's gpudiag, as this process does
        env = environment(library, work / "node.flat", Path(os.devnull))
        env.pop("GPUDIAG_STANDIN_LOG")  # no call log: it would be timed too
        # nor the stand-in's pointer checks (each reads /proc/self/maps: 15 ms a window here)
        env["GPUDIAG_STANDIN_UNCHECKED"] = "1"
        reference = _child(REFERENCE, env, str(args.rounds))
        textfile = str(work / "gpudiag.prom")
        ours = _child(MONITOR, env, str(args.rounds), str(args.seconds), textfile, folder)
    print(
        f"gpudiag monitor, {GPUS} GPUs (C NVML stand-in, {WINDOWS}-window trace), "
        f"{args.rounds} windows:"
    )
    print(
        f"  monitor window (sample, verdicts, stragglers, ring, exposition): "
        f"{ours['cpu'] * 1e3:.3f} ms CPU = {ours['cpu'] * 100:.3f}% of one core at 1 Hz "
        f"(target at most 1%)"
    )
    print(
        f"  reference, bare NVML sampling loop (the same pynvml calls): "
        f"{reference['cpu'] * 1e3:.3f} ms CPU"
    )
    print(
        f"  resident memory: monitor {ours['rss'] / 1e6:.1f} MB (ring {int(ours['ring'])} windows, "
        f"history {int(ours['history']) // GPUS} windows held for Parquet; target at most "
        f"50 MB), reference {reference['rss'] / 1e6:.1f} MB"
    )
    if ours["share"] is not None:
        print(
            f"  monitor loop at 1 Hz for {args.seconds:g} s (textfile written every window, "
            f"endpoint up): {ours['share'] * 100:.3f}% of one core"
        )


if __name__ == "__main__":
    main()
