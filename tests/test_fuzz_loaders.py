"""Property-based fuzzing of every loader (snapshot, nvidia-smi import, rules, NVML replay,
capture, a capture's NVML through the probes and rules, the fleet's fast path and report,
a capture's samples as watch reads them, the Slurm health check's settings file) with a
bounded budget: mutated seed files (numbers no reading holds and line breaks in strings
among the edits) are accepted or refused with the loader's own error, never another
exception, and nothing they let through holds a control character, nor a line break in
a one-line field. `python benchmarks/fuzz_loaders.py` runs longer."""

from __future__ import annotations

import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz_inputs import EDITS, LOADERS, mutate, seeds, work_dir

SEEDS = seeds()
EXAMPLES = 300  # per loader: about half a second each on the 2-core development VM
# but the capture's NVML through the probes and rules (33 ms an input): 15, half a second
FEWER = {"nvml": 15}
edits = st.lists(
    st.tuples(
        st.sampled_from(EDITS),
        st.floats(min_value=0, max_value=1, allow_nan=False),
        st.integers(min_value=0, max_value=1 << 16),
    ),
    min_size=1,
    max_size=6,
)


@pytest.mark.parametrize("loader", list(LOADERS))
def test_loader_survives_mutated_inputs(loader: str) -> None:
    work = work_dir()
    load = LOADERS[loader]

    @settings(
        max_examples=FEWER.get(loader, EXAMPLES),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        database=None,
    )
    @given(st.sampled_from(SEEDS[loader]), edits)
    def fuzz(seed: str, changes: list) -> None:
        load(mutate(seed, changes), work)

    try:
        fuzz()
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.mark.parametrize("loader", list(LOADERS))
def test_seeds_load(loader: str) -> None:
    """The seeds themselves are accepted (a fuzzer of refused seeds tests little)."""
    from gpudiag.importing import import_text
    from gpudiag.nvml import ReplayBackend
    from gpudiag.rulefile import merge_rules
    from gpudiag.snapshot import loads

    for seed in SEEDS[loader]:
        if loader == "snapshot":
            assert loads(seed).host == "node-1"
        elif loader == "import":
            assert import_text(seed)[1]
        elif loader == "rules":
            assert merge_rules([("seed.toml", seed)])
        elif loader in ("capture", "nvml", "fleet", "samples", "healthcheck"):
            from fuzz_inputs import LOADERS as loaders
            from fuzz_inputs import work_dir as scratch

            assert loaders[loader](seed, scratch())
        else:
            from gpudiag.inputs import parse_data

            assert ReplayBackend(parse_data(seed, "seed"))
