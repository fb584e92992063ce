"""`gpudiag diff`'s questions of each key, answered once per key template (issue 44):
the same answers as the catalog gives key by key, the catalog asked as often at 16 GPUs
as at 2, and the one pass over the keys gathering what the report walked for."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest

from gpudiag import catalog, diff, shipped
from gpudiag.model import Reading, Snapshot

from conftest import demo_on_host_basic

_GPU = re.compile(r"^(gpu|topo\.gpu)\.(\d+)(\..*|)$")
_TWO = re.compile(r"^topo\.gpu\.(\d+)\.(\d+)(\..*|)$")
ODD_KEYS = [
    "gpu.3",
    "gpu.3.",
    "gpu.03.health",
    "gpu.1234567.health",
    "gpu.\u0663.health",  # an Arabic-Indic 3: a digit to \d, no index to the catalog
    "gpu.3.made.up.key",
    "gpu.0.nvlink.5.state",
    "gpu.12.nvlink.17.made.up",
    "topo.gpu.3",
    "topo.gpu.3.3",
    "topo.gpu.01.02.p2p",
    "topo.gpu.2.9999999.p2p",
    "topo.gpu.\u0661.2.p2p",
    "topo.gpu.2.\u0661.p2p",
    "topo.gpu.1.nic.0000:18:00.0",
    "topo.gpu.1.nic.mlx5_0",
    "topo.gpu.1.nearest_nic",
    "topo.gpus",
    "topology.x",
    "pcie.0000:18:00.0.link_width",
    "node.hostname",
    "made.up",
]


def _expected(key: str) -> tuple[Any, ...]:
    """What the diff asked of the catalog key by key before issue 44 (gpudiag/diff.py at
    9d45267: is_kernel_reading, _always_varies, is_verdict, is_counter, gpu_of, the
    health test, _group_of, _PAIR)."""
    found = shipped.find(key)
    verdict = found is not None and found.template in diff.VERDICT_TEMPLATES
    index = catalog.gpu_of(key)
    if key.startswith("topo."):
        group = "topology"
    else:
        scope, values = catalog.subject_of_key(key)
        if scope == "nvlink":
            scope, values = "gpu", {"gpu": values["gpu"]}
        group = catalog.subject_title(scope, values)
    pair = re.match(r"topo\.gpu\.(\d+)\.(\d+)(?:\.|$)", key)
    return (
        shipped.is_kernel_reading(key),
        found is not None and found.change is catalog.Change.VOLATILE and not verdict,
        verdict,
        shipped.is_counter(key),
        None if index is None else str(index),
        index is not None and key == f"gpu.{index}.health",
        group,
        None if pair is None else pair.groups(),
    )


def _forget() -> None:
    """Every answer the diff keeps of a key, forgotten (what a new process starts with)."""
    try:
        from gpudiag import diff_keys
    except ImportError:  # the diff before issue 44 (this test checked against it)
        return
    caches = (diff_keys.INFO, diff_keys._SHAPES, diff_keys._RENUMBERED)
    for cache in (*caches, diff_keys._GPU_RESTS, diff_keys._PAIR_RESTS):
        cache.clear()
    diff_keys._free.clear()  # and what it works out once per process
    diff_keys._HEADS.clear()
    shipped.parts.cache_clear()  # renumbering's key parse (an earlier test may have filled it)


def test_each_answer_is_the_one_worked_out_key_by_key() -> None:
    """Every key of the demo, at GPU indices 0, 7, 10, 63 and 123456, every declared
    template's sample key, and odd keys (no index, a long or non-ASCII one, a leading 0):
    the answers from the key's template are the catalog's, key by key; and its GPUs
    renumbered by positions as shipped.renumber_gpus renumbers them."""
    from gpudiag import diff_keys

    _forget()
    demo = list(demo_on_host_basic().readings_by_key)
    keys = {*ODD_KEYS, *(catalog.sample_key(t) for t in shipped.catalog().declared)}
    for key in demo:
        for n in ("0", "7", "10", "63", "123456"):
            keys.add(_TWO.sub(rf"topo.gpu.{n}.1\3", _GPU.sub(rf"\1.{n}\3", key)))
    mapping = {"0": "5", "1": "0", "3": "12", "7": "1", "10": "3", "03": "4", "63": "2"}
    in_order = sorted(keys)

    def answers(key: str, got: tuple[Any, ...]) -> tuple[Any, ...]:
        return (*got[:6], diff_keys.group(key), got[7])  # a key in full's group when asked

    made = diff_keys.infos(in_order)  # in one loop
    assert [answers(k, m) for k, m in zip(in_order, made, strict=True)] == [
        _expected(k) for k in in_order
    ]
    _forget()
    wrong = [k for k in in_order if answers(k, diff_keys.info(k)) != _expected(k)]  # one by one
    assert wrong == []
    renumber = shipped.renumber_gpus
    moved = [k for k in sorted(keys) if diff_keys.renumber(k, mapping) != renumber(k, mapping)]
    assert moved == []


def _on_gpus(snapshot: Snapshot, gpus: int, shift: int = 0) -> Snapshot:
    """`snapshot` with GPU 0's readings copied to `gpus` GPUs (GPU i's own bus id) and the
    pair 0-1's to every pair, the others' dropped (benchmarks/cli_speed.py's copies);
    each GPU i numbered (i + shift) % gpus."""

    def moved(i: int) -> int:
        return (i + shift) % gpus

    def copies(r: Reading) -> list[Reading]:
        if m := _TWO.match(r.key):
            if (m[1], m[2]) != ("0", "1"):
                return []
            return [
                replace(r, key=f"topo.gpu.{moved(i)}.{moved(j)}{m[3]}")
                for i in range(gpus)
                for j in range(gpus)
                if i != j
            ]
        if m := _GPU.match(r.key):
            if m[2] != "0":
                return []
            bus = m[3] == ".pci.bus_id" and r.ok
            return [
                replace(r, key=f"{m[1]}.{moved(i)}{m[3]}", value=f"00000000:{16 + i:02X}:00.0")
                if bus
                else replace(r, key=f"{m[1]}.{moved(i)}{m[3]}")
                for i in range(gpus)
            ]
        return [r]

    probes = tuple(
        replace(p, readings=tuple(c for r in p.readings for c in copies(r)))
        for p in snapshot.probes
    )
    return replace(snapshot, probes=probes)


def test_a_key_template_is_asked_of_the_catalog_once_whatever_the_gpus(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 44: a diff asked the catalog about every key (a lookup and a subject match,
    about 2 us each; 26,000 keys at 64 GPUs), and renumbered B's GPUs key by key. Now each
    key template is asked once: a diff of 16 GPUs, B's GPUs in another order, asks the
    catalog as often as one of 2 GPUs (the old code: about 8 times as often)."""
    demo = demo_on_host_basic()
    asked = {"find": 0, "subject": 0}
    shipped_catalog = shipped.catalog()
    find, subject_of_key = shipped_catalog.find, catalog.subject_of_key

    def counted_find(key: str) -> Any:
        asked["find"] += 1
        return find(key)

    def counted_subject(key: str) -> Any:
        asked["subject"] += 1
        return subject_of_key(key)

    monkeypatch.setattr(shipped_catalog, "find", counted_find)
    monkeypatch.setattr(catalog, "subject_of_key", counted_subject)
    counts = {}
    for gpus in (2, 16):
        a, b = _on_gpus(demo, gpus), _on_gpus(demo, gpus, shift=1)
        _forget()
        asked.update(find=0, subject=0)
        result = diff.diff_snapshots(a, b)
        diff.report_text(result, a, b)
        assert result.gpu_map == {str((i + 1) % gpus): str(i) for i in range(gpus)}
        assert result.exit_code() == 0 and len(result.readings) > 200 * gpus
        counts[gpus] = dict(asked)
    assert counts[2]["find"] > 0 and counts[16] == counts[2]


def test_the_one_pass_gathers_what_a_walk_of_the_readings_gives() -> None:
    """diff_snapshots gathers the changes that differ, the verdicts' and each GPU's
    readings by kind as it compares; a Diff of the same readings made without them (a
    walk of its readings) gives the same answers."""
    a = demo_on_host_basic()
    lost = _lose(a, 7)
    for one, other in ((a, lost), (lost, a)):
        made = diff.diff_snapshots(one, other)
        walked = diff.Diff(made.readings, gpu_map=made.gpu_map, same_node=made.same_node)
        assert made._sides is not None and walked._sides is None
        for ask in (
            lambda d: d.one_sided_gpus(),
            lambda d: d.lost_gpus(),
            lambda d: d.health_changes(),
            lambda d: d.differences(),
            lambda d: d.differences(True),
            lambda d: d.rising_counters(),
            lambda d: d.verdict_line(),
        ):
            assert ask(made) == ask(walked)
        assert made.one_sided_gpus() == {"7": ("only_a" if one is a else "only_b", 0)}
        assert diff.report_text(made, one, other) == diff.report_text(walked, one, other)


def _lose(snapshot: Snapshot, gpu: int) -> Snapshot:
    """GPU `gpu`'s health failed (GpuIsLost), its other readings as they were."""
    from gpudiag.model import ReadingStatus

    def lost(r: Reading) -> Reading:
        if r.key == f"gpu.{gpu}.health":
            return replace(r, value=None, status=ReadingStatus.ERROR, reason="GpuIsLost")
        return r

    probes = tuple(replace(p, readings=tuple(map(lost, p.readings))) for p in snapshot.probes)
    return replace(snapshot, probes=probes)


def test_groups_in_the_same_natural_order_list_their_keys_in_key_order() -> None:
    """The report lists changes by group, the groups in natural order, then by key:
    groups that natural order cannot tell apart ('GPU 3', 'GPU 03' and 'GPU 003', of a
    hand-made or damaged file) list their keys in key order, as before issue 44. Given
    each its own place, they came in the order of a set of them, which varies with the
    strings' hashes: six such triples all in key order by chance is 1 in 6**6."""
    from gpudiag.model import ProbeResult, ProbeStatus

    def snapshot(keys: list[str], value: str) -> Snapshot:
        probe = ProbeResult("gpu", ProbeStatus.OK, 0.0, tuple(Reading(k, value) for k in keys))
        return Snapshot(
            host="n", created="2026-11-22T00:00:00Z", gpudiag_version="0", probes=(probe,)
        )

    for gpu in "123456":
        keys = [f"gpu.{gpu}.a", f"gpu.0{gpu}.b", f"gpu.{gpu}.c", f"gpu.00{gpu}.d", f"gpu.0{gpu}.e"]
        a, b = snapshot(keys, "x"), snapshot(keys, "y")
        lines = diff.report_text(diff.diff_snapshots(a, b), a, b).splitlines()
        listed = [line.split(":")[0].strip() for line in lines if line.startswith("    ")]
        assert listed == sorted(keys)


def test_the_equal_changes_are_made_only_when_asked() -> None:
    """A diff whose report is printed never asks `readings` of its equal changes (26,000
    of them at 64 GPUs, 16 ms to make): diff_snapshots makes the changes that differ,
    and `readings`, first asked, is every key's change in key order, those among them."""
    a = demo_on_host_basic()
    b = _lose(a, 7)
    made = diff.diff_snapshots(a, b)
    diff.report_text(made, a, b)
    diff.report_json(made, True)
    assert made.exit_code() == 2 and made.lost_gpus() == {"7": "B"}
    assert "readings" not in vars(made)  # not made: the report did not ask
    readings = made.readings
    assert made.readings is readings  # made once
    keys = sorted(k for k in a.readings_by_key if not shipped.is_kernel_reading(k))
    assert [c.key for c in readings] == keys
    differing = [c for c in readings if c.kind != "equal"]
    assert len(differing) == 1 and differing[0] is made.differences(True)[0]
    assert all(c.a is a.readings_by_key[c.key] for c in readings)
    assert all(c.b is b.readings_by_key[c.key] for c in readings)
    assert all(c.noisy == diff._always_varies(c.key) for c in readings)


def test_the_keys_ending_so_are_found_in_order_whatever_they_hold() -> None:
    """match_gpus finds the bus ids' keys in the keys' lines joined (diff._ending): the
    keys a test of each finds, in order; a key holding a line break (a damaged file's)
    cannot pass a piece of itself off as a key: then each key is tested."""
    from gpudiag.diff import _ending

    end = ".pci.bus_id"
    keys = dict.fromkeys(
        ("gpu.0.pci.bus_id", "x", ".pci.bus_id", "gpu.1.a.pci.bus_id", "gpu.2.pci.bus_idx",
         "pci.bus_id", "gpu.3.pci.bus_id.pci.bus_id", "gpu.4.pci.bus_id")
    )  # fmt: skip
    assert _ending(keys, end) == [k for k in keys if k.endswith(end)]
    assert len(_ending(keys, end)) == 5
    broken = dict.fromkeys(["gpu.0.x\ngpu.5.pci.bus_id", "gpu.6.pci.bus_id\nx", "gpu.7.pci.bus_id"])
    assert _ending(broken, end) == ["gpu.0.x\ngpu.5.pci.bus_id", "gpu.7.pci.bus_id"]
    assert _ending({}, end) == []
