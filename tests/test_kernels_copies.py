"""Copies: the host-copy and peer-matrix runners for real on the CPU (NUMA nodes as
endpoints), their byte-exact verification, placement and statistics."""

from __future__ import annotations

import os
import threading

import numpy as np

from gpudiag.kernels import copies
from gpudiag.model import ProbeStatus

NBYTES = 1 << 20
CPUS = sorted(os.sched_getaffinity(0))
# Two "nodes" on this machine's CPUs: a real split where there are two CPUs.
TWO_NODES = {0: CPUS[:1], 1: CPUS[1:2] or CPUS[:1]}


def test_pattern_differs_per_seed_and_position() -> None:
    a, b = np.empty(64, np.uint8), np.empty(64, np.uint8)
    copies.fill_pattern(a, 1)
    copies.fill_pattern(b, 2)
    words = a.view(np.uint64)
    assert not np.array_equal(a, b) and len(set(words.tolist())) == words.size


def test_buffers_are_touched_on_their_nodes_cpus() -> None:
    seen = {}
    memory = copies.NumaMemory(TWO_NODES)
    for node in TWO_NODES:
        seen[node] = memory.on_node(node, lambda: sorted(os.sched_getaffinity(0)))
    assert seen == TWO_NODES


def test_host_copies_local_and_remote_every_direction_verified() -> None:
    engine = copies.NumaEngine(TWO_NODES)
    try:
        results = copies.run_host_copies(
            engine, {0: 0, 1: -1}, [0, 1], nbytes=NBYTES + 3, trials=3, warmup=1
        )
    finally:
        engine.close()
    metrics = [(r.device, r.metric) for r in results]
    assert metrics == [
        (f"cpu-numa{e}", f"{d}.{p}")
        for e in (0, 1)
        for p in ("local", "remote")
        for d in copies.DIRECTIONS
    ]
    for result in results:
        assert result.status is ProbeStatus.OK, result.error
        assert len(result.samples) == 3 and result.stats is not None and result.unit == "GB/s"
        params = dict(result.params)
        assert params["bytes"] == NBYTES  # rounded down to whole 8-byte words
    by_metric = {(r.device, r.metric): dict(r.params)["numa_node"] for r in results}
    assert by_metric[("cpu-numa0", "h2d.local")] == 0
    assert by_metric[("cpu-numa0", "h2d.remote")] == 1
    assert by_metric[("cpu-numa1", "h2d.local")] == 0  # node unknown (-1): the first is local


def test_one_node_has_no_remote_placement_and_says_why() -> None:
    engine = copies.NumaEngine({0: CPUS})
    try:
        results = copies.run_host_copies(engine, {0: 0}, [0], nbytes=NBYTES, trials=2, warmup=0)
    finally:
        engine.close()
    assert [r.metric for r in results] == [
        f"{d}.{p}" for p in ("local", "remote") for d in copies.DIRECTIONS
    ]
    remote = results[3:]
    assert {r.status for r in remote} == {ProbeStatus.SKIPPED}
    assert {r.error for r in remote} == {"one NUMA node: no remote host memory"}
    assert all(not r.samples and r.stats is None for r in remote)


def test_a_corrupted_copy_is_an_error_however_fast() -> None:
    class Corrupting(copies.NumaEngine):
        def time_copies(self, plan, serial=False):
            seconds = super().time_copies(plan)
            plan[0][0][NBYTES // 2] ^= 1  # one bit flipped in the destination
            return seconds

    engine = Corrupting({0: CPUS})
    try:
        results = copies.run_peer_matrix(engine, nbytes=NBYTES, trials=2, warmup=0)
    finally:
        engine.close()
    assert results and all(r.status is ProbeStatus.ERROR for r in results)
    assert "verification failed" in results[0].error


def test_peer_matrix_covers_every_ordered_pair_with_access_status() -> None:
    engine = copies.NumaEngine(TWO_NODES)
    try:
        results = copies.run_peer_matrix(engine, nbytes=NBYTES, trials=3, warmup=1)
    finally:
        engine.close()
    assert [(r.device, r.metric) for r in results] == [
        ("cpu-numa0", "to.cpu-numa1"),
        ("cpu-numa0", "bidir.cpu-numa1"),
        ("cpu-numa1", "to.cpu-numa0"),
        ("cpu-numa1", "bidir.cpu-numa0"),
    ]  # no latency on the CPU: a Python call costs more than the copy
    assert all(r.status is ProbeStatus.OK and r.stats for r in results)
    assert {dict(r.params)["peer_access"] for r in results} == {"numa"}


def test_peer_matrix_stops_when_cancelled() -> None:
    cancel = threading.Event()
    engine = copies.NumaEngine(TWO_NODES)
    try:
        results = copies.run_peer_matrix(
            engine,
            nbytes=NBYTES,
            trials=2,
            warmup=0,
            cancel=cancel,
            progress=lambda f: cancel.set(),
        )
    finally:
        engine.close()
    assert len(results) == 2  # the first pair only


def test_latency_where_an_engine_measures_it() -> None:
    class Timed(copies.NumaEngine):
        def latency(self, dst, src, dst_endpoint):
            return self.time_copies([(dst[:8], src[:8], dst_endpoint)])

    engine = Timed({0: CPUS})
    try:
        results = copies.run_peer_matrix(engine, nbytes=NBYTES, trials=3, warmup=0)
    finally:
        engine.close()
    latency = [r for r in results if r.metric.startswith("latency.")]
    assert len(latency) == 1 and latency[0].unit == "us" and latency[0].stats.median > 0
