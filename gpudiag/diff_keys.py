"""What `gpudiag diff` asks of every key, worked out once per key template.

A diff asks each key of two snapshots whether it is a kernel figure, volatile or a
verdict on a part, which GPU it is about and under which heading it is listed; at 64 GPUs
that is 26,000 keys, and the catalog's answer (a subject match and a lookup, about 2 us
each) was worked out for every one. Most keys are one GPU's (`gpu.N.rest`) or one GPU
pair's (`topo.gpu.N.M.rest`): the catalog's answers are the same for every N, so they
are worked out once for the key's shape (its indices as 0 and 1: `gpu.0.rest`) and the
index put in (`info`, `infos`). A key of another form (the node's, a PCIe device's) is
worked out on its own, once. A shape stands for its keys only where the catalog leaves
the indices free (`_indices_free`: no declared template spells one out); B's GPUs are
renumbered by the shape's index positions only where shipped.renumber_gpus renumbers
the shape's key there (`_in_place`); else key by key, as before.
tests/test_diff_keys.py holds each answer to the catalog's, key by key.
"""

from __future__ import annotations

import re

from gpudiag import catalog, shipped
from gpudiag.catalog import MAX_INDEX_DIGITS, PLACEHOLDER_PATTERN, Change

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

# The declared readings whose value is a verdict on a part, not a figure: the catalog
# declares them volatile (a GPU's health may change between any two runs), yet a change
# of one is the news of a diff (a GPU lost), never hidden among the readings that vary.
VERDICT_TEMPLATES = frozenset({"gpu.{gpu}.health", "gpu.{gpu}.recovery_action"})

# An info: (kernel, noisy, verdict, counter, gpu, health, group, pair), by position
KERNEL, NOISY, VERDICT, COUNTER, GPU, HEALTH, GROUP, PAIR = range(8)
# kernel: a reading derived from kernel results (compared as kernel results instead);
# noisy: declared volatile and no verdict (hidden unless asked); verdict: VERDICT_TEMPLATES;
# counter: a counter since boot; gpu: the index of a `gpu.N.` key as str(int(N)) (what
# catalog.gpu_of gives, as text), else None; health: the key is `gpu.{gpu}.health` of
# that index; group: the heading it is listed under (ReadingChange.group; None where a
# key worked out in full has not been asked it: `group` gives it); pair: a topology
# pair's two indices as written (`topo.gpu.N.M`), else None.

_PAIR = re.compile(r"topo\.gpu\.(\d+)\.(\d+)(?:\.|$)")
INFO: dict[str, tuple] = {}  # key -> its info
_SHAPES: dict[str, tuple | None] = {}  # a shape's key -> its (kernel, noisy, verdict, counter)
_RENUMBERED: dict[str, bool] = {}  # a shape's key -> whether renumber may use its positions
# a GPU key's rest (gpu.N.REST) and a GPU pair key's (topo.gpu.N.M.REST, None: none) ->
# its shape's answers, as _SHAPES has them: `infos` looks them up without the shape's key
_GPU_RESTS: dict[str, tuple | None] = {}
_PAIR_RESTS: dict[str | None, tuple | None] = {}
_MAX_KEYS = 1 << 16  # a long-lived process diffing many nodes starts again past this


def info(key: str) -> tuple:
    """The diff's answers for a key (KERNEL, NOISY, ... by position), worked out once."""
    found = INFO.get(key)
    return found if found is not None else work_out(key)


def infos(keys: Iterable[str]) -> list[tuple]:
    """`info` of each key, in order (what `info` gives, key by key): the keys of a GPU
    and of a GPU pair from their shapes in this one loop, the index read once for the
    run of keys that start alike (`gpu.N.`, `topo.gpu.N.M.`: keys in order come GPU by
    GPU, pair by pair), then only the rest of each key looked up; a key of another form
    as `info` gives it (worked out once)."""
    gpu_rests, pair_rests = _GPU_RESTS, _PAIR_RESTS
    out: list[tuple] = []
    append = out.append
    run = ""  # what the GPU keys of this run start with ('' before any)
    tail: tuple = ()  # (gpu, health, group, pair) of its keys
    health: tuple = ()  # and of its health reading's
    pair_run = ""  # what the GPU pair keys of this run start with, and their tail
    pair_tail: tuple = ()
    for key in keys:
        if run and key.startswith(run):
            rest = key[len(run) :]
        elif key[:4] == "gpu." and len(parts := key.split(".", 2)) == 3 and _is_index(parts[1]):
            index, rest = parts[1], parts[2]
            gpu = index if index[0] != "0" or len(index) == 1 else str(int(index))
            run, tail = f"gpu.{index}.", (gpu, False, "GPU " + index, None)
            health = (gpu, gpu == index, "GPU " + index, None)
        else:
            rest = None
        if rest is not None:  # a GPU's key
            shape = gpu_rests.get(rest, False)
            if shape is False:
                shape = gpu_rests[rest] = _shape("gpu.0." + rest)
            # a tuple's sum: no list made on the way
            append(info(key) if shape is None else shape + (health if rest == "health" else tail))
            continue
        if pair_run and key.startswith(pair_run):
            rest = key[len(pair_run) :]
        elif (
            key[:9] == "topo.gpu."
            and len(parts := key.split(".", 4)) >= 4
            and _is_index(parts[2])
            and _is_index(parts[3])
        ):
            pair_run = f"topo.gpu.{parts[2]}.{parts[3]}."
            pair_tail = (None, False, "topology", (parts[2], parts[3]))
            rest = parts[4] if len(parts) == 5 else None  # None: `topo.gpu.N.M` itself
        else:
            append(info(key))
            continue
        shape = pair_rests.get(rest, False)
        if shape is False:
            canonical = "topo.gpu.0.1" if rest is None else "topo.gpu.0.1." + rest
            shape = pair_rests[rest] = _shape(canonical)
        append(info(key) if shape is None else shape + pair_tail)
    return out


def work_out(key: str) -> tuple:
    """`info` of a key not yet asked: from its shape where it has one, else in full."""
    if len(INFO) >= _MAX_KEYS:
        INFO.clear()
    head = key[:4]
    made = None
    if head == "gpu.":
        made = _gpu_key(key)
    elif head == "topo":
        made = _topo_key(key)
    if made is None:
        made = _in_full(key)
    INFO[key] = made
    return made


def _is_index(text: str) -> bool:
    """An instance index as the catalog reads one: ASCII digits, MAX_INDEX_DIGITS at most."""
    return 0 < len(text) <= MAX_INDEX_DIGITS and text.isascii() and text.isdigit()


def _gpu_key(key: str) -> tuple | None:
    """A `gpu.N.rest` key's info from its shape `gpu.0.rest` (None: no shape to use)."""
    parts = key.split(".", 2)
    if len(parts) < 3 or not _is_index(index := parts[1]):
        return None
    shape = _shape("gpu.0." + parts[2])
    if shape is None:
        return None
    gpu = index if index[0] != "0" or len(index) == 1 else str(int(index))
    health = parts[2] == "health" and gpu == index
    return (*shape, gpu, health, "GPU " + index, None)


def _topo_key(key: str) -> tuple | None:
    """A `topo.gpu.N.rest` or `topo.gpu.N.M.rest` key's info from its shape (None: no
    shape to use)."""
    parts = key.split(".", 4)
    if len(parts) < 4 or parts[1] != "gpu" or not _is_index(parts[2]):
        return None  # `topo.gpu.N` alone is worked out in full
    if _is_index(parts[3]):  # a GPU pair
        shape = _shape("topo.gpu.0.1" + "".join("." + p for p in parts[4:]))
        pair = (parts[2], parts[3])
    elif parts[3].isdigit():
        return None  # an index the catalog does not read as one (a pair for _PAIR)
    else:
        shape = _shape("topo.gpu.0." + ".".join(parts[3:]))
        pair = None
    return None if shape is None else (*shape, None, False, "topology", pair)


def _shape(canonical: str) -> tuple | None:
    """(kernel, noisy, verdict, counter) of every key of this shape, or None where the
    shape cannot stand for its keys (`_indices_free`)."""
    found = _SHAPES.get(canonical, False)
    if found is not False:
        return found  # type: ignore[return-value]
    shape = None
    if _indices_free():
        shape = _answers(canonical)
    _SHAPES[canonical] = shape
    return shape


def _answers(key: str) -> tuple[bool, bool, bool, bool]:
    """(kernel, noisy, verdict, counter) of a key, from its declaration."""
    found = shipped.find(key)
    template = found.template if found is not None else None
    return (
        found is not None and "kernels" in found.producers,
        found is not None and found.change is Change.VOLATILE and template not in VERDICT_TEMPLATES,
        template in VERDICT_TEMPLATES,
        found is not None and found.change is Change.COUNTER,
    )


def _in_full(key: str) -> tuple:
    """A key's info worked out on its own (a key of no shape)."""
    index = catalog.gpu_of(key) if key.startswith("gpu.") else None
    gpu = None if index is None else str(index)
    pair = _PAIR.match(key) if key.startswith("topo.gpu.") else None
    return (
        *_answers(key),
        gpu,
        gpu is not None and key == f"gpu.{gpu}.health",
        None,  # its group: a subject match, for the few keys listed (`group`)
        None if pair is None else pair.groups(),
    )


def group(key: str) -> str:
    """The heading a key is listed under (ReadingChange.group): its info's, worked out
    here for a key worked out in full."""
    got = info(key)
    found = got[GROUP]
    if found is None:
        found = group_of(key)
        INFO[key] = (*got[:GROUP], found, *got[GROUP + 1 :])
    return found


def group_of(key: str) -> str:
    """What a key is about, as findings name it ('GPU 3' for its NVLinks too, 'PCIe
    0000:18:00.0', 'IB mlx5_0 port 1'), 'topology' for the GPU pairs, else 'node'."""
    if key.startswith("topo."):
        return "topology"
    if not _HEADS:  # the first segments of the subjects' stems, where none is a placeholder
        heads = frozenset(s.stem.partition(".")[0] for s in catalog.SUBJECTS.values())
        node = catalog.SUBJECTS["node"].title == "node" and not any("{" in h for h in heads)
        _HEADS.append(heads if node else None)
    if _HEADS[0] is not None and key.partition(".")[0] not in _HEADS[0]:
        return "node"  # no subject's stem starts it (what subject_of_key finds)
    scope, values = catalog.subject_of_key(key)
    if scope == "nvlink":
        scope, values = "gpu", {"gpu": values["gpu"]}
    return catalog.subject_title(scope, values)


_free: list[bool] = []  # _indices_free's answer, once per process
_HEADS: list[frozenset[str] | None] = []  # group_of's subject heads, once per process


def _indices_free() -> bool:
    """Whether no declared template (and no subject's stem) spells out what stands where
    a shape puts an index (`gpu.X.`, `topo.gpu.X.` and `topo.gpu.X.Y`): each is one whole
    placeholder or literal text without a digit, so that which template a key of a shape
    matches does not depend on its indices; and a GPU's key is about that GPU (`GPU N`,
    its NVLinks' too: the only subjects whose stem starts `gpu.`, and none starts with a
    placeholder). True for the shipped catalog; a catalog that breaks it is asked key by
    key."""
    if not _free:
        subjects = catalog.SUBJECTS.values()
        templates = [*shipped.catalog().declared, *(s.stem for s in subjects)]
        _free.append(
            all(_free_at(t) for t in templates)
            and {s.name for s in subjects if s.stem.startswith("gpu.")} == {"gpu", "nvlink"}
            and not any(s.stem.startswith("{") for s in subjects)
            and catalog.SUBJECTS["gpu"].title == "GPU {gpu}"
        )
    return _free[0]


def _free_at(template: str) -> bool:
    segments = template.split(".")
    if segments[0] == "gpu":
        where = segments[1:2]
    elif segments[0] == "topo" and segments[1:2] == ["gpu"]:
        where = segments[2:4]
    else:
        return True
    return all(
        PLACEHOLDER_PATTERN.fullmatch(s) is not None
        or ("{" not in s and not any(c.isdigit() for c in s))
        for s in where
    )


class _Marked(dict):
    """A GPU mapping that marks every index it is asked for: '3' -> '<3>'."""

    def get(self, key: str, default: object = None) -> str:  # type: ignore[override]
        return f"<{key}>"


def _in_place(canonical: str, indices: int) -> bool:
    """Whether the catalog renumbers the shape's key (shipped.renumber_gpus) at its
    index positions and nowhere else, so that a key of the shape is renumbered there;
    asked once per shape, where a diff renumbers (its template's pattern is compiled)."""
    found = _RENUMBERED.get(canonical)
    if found is not None:
        return found
    if not _SHAPES.get(canonical):
        _RENUMBERED[canonical] = False
        return False
    parts = canonical.split(".")
    first = 1 if parts[0] == "gpu" else 2
    for position in range(first, first + indices):
        parts[position] = f"<{parts[position]}>"
    _RENUMBERED[canonical] = shipped.renumber_gpus(canonical, _Marked()) == ".".join(parts)
    return _RENUMBERED[canonical]


def renumber(key: str, mapping: Mapping[str, str]) -> str:
    """shipped.renumber_gpus(key, mapping), by index positions where the key has a shape
    (the mapping's values put where the key's indices are)."""
    info(key)  # its shape worked out, where it has one
    if key.startswith("gpu."):
        parts = key.split(".", 2)
        if len(parts) == 3 and _is_index(index := parts[1]) and _in_place("gpu.0." + parts[2], 1):
            return f"gpu.{mapping.get(index, index)}.{parts[2]}"
    elif key.startswith("topo.gpu."):
        parts = key.split(".", 4)
        if len(parts) > 3 and _is_index(gpu := parts[2]):
            if _is_index(peer := parts[3]):
                rest = "".join("." + p for p in parts[4:])
                if _in_place("topo.gpu.0.1" + rest, 2):
                    return f"topo.gpu.{mapping.get(gpu, gpu)}.{mapping.get(peer, peer)}{rest}"
            elif not peer.isdigit() and _in_place("topo.gpu.0." + (rest := ".".join(parts[3:])), 1):
                return f"topo.gpu.{mapping.get(gpu, gpu)}.{rest}"
    return shipped.renumber_gpus(key, mapping)
