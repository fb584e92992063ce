"""Why is it slow: what bounds each GPU right now, from NVML's performance counters.

- `sampler`: one window of counters per GPU (GPM metrics where the GPU has them, else the
  older utilisation, PCIe and NVLink counters), with clocks, power, temperature and the
  clock event reasons of the same window; a metric a GPU lacks is unsupported, never 0.
- `verdicts`: the bound-by verdict of each GPU per window, from a closed set, with its
  fractions against the node's own ceilings, and the stragglers within the node; the
  thresholds are data (rules/telemetry.toml).
- `monitor` and `exposition`: `gpudiag monitor`, the always-on sampler (a bounded ring,
  a Prometheus endpoint, a node_exporter textfile, event lines).

Everything here reads NVML through gpudiag/nvml.py, the project's one NVML interface. It
was run through the real pynvml against the C stand-in (tests/nvml_standin/) with scripted
counter traces, never on a GPU.
"""
