"""gpudiag.record: the classes `gpudiag check` imports are records, not dataclasses
(issue 44: building the dataclasses was about 10 ms of the command's 64 at 8 GPUs), and
each behaves as its dataclass twin (the same class made by @dataclass): repr, equality,
hash, frozen-ness, __init__'s signature and binding, and dataclasses' replace, fields
and asdict."""

from __future__ import annotations

import dataclasses
import inspect
import json
from typing import Any

import pytest

from gpudiag import (
    catalog,
    derive,
    model,
    profiles,
    rule_operators,
    ruleengine,
    rulefile,
    session,
    snapshot,
)
from gpudiag.record import Field, field, record

from conftest import REPO, modules_loaded_by

RECORDS = (
    model.Reading, model.ProbeResult, model.Finding, model.Statistics, model.KernelResult,
    model.Snapshot, catalog.Subject, catalog.Declared, catalog.Also, catalog.Catalog,
    catalog.SubjectIndex, rule_operators.Operator, profiles.Profile, rulefile.Rule,
    derive.Derivation, ruleengine._Context, ruleengine._Plan, session.LiveNode,
    session.RuleTally,
)  # fmt: skip


def twin(cls: Any) -> Any:
    """The dataclass the record `cls` stands for: its fields, with their options."""
    space: dict[str, Any] = {"__annotations__": dict(cls.__annotations__)}
    for name, spec in cls.__record_fields__.items():
        options = {"init": spec.init, "repr": spec.repr, "compare": spec.compare}
        if spec.default_factory is not Field().default_factory:
            options["default_factory"] = spec.default_factory
        elif spec.default is not Field().default:
            options["default"] = spec.default
        space[name] = dataclasses.field(**options)
    if hasattr(cls, "__post_init__"):
        space["__post_init__"] = cls.__post_init__
    made = type(cls.__name__, (), space)
    made.__qualname__ = cls.__qualname__
    return dataclasses.dataclass(frozen="__setattr__" in vars(cls))(made)


def stand_ins(cls: Any) -> tuple[Any, Any]:
    """Two instances with a text of its own in every field (made without __init__, whose
    checks they would not pass), the second differing from the first in its last field."""
    first, second = object.__new__(cls), object.__new__(cls)
    values = {name: f"{name}-value" for name in cls.__record_fields__}
    object.__setattr__(first, "__dict__", values)
    last = next(reversed(values))
    object.__setattr__(second, "__dict__", {**values, last: "other"})
    return first, second


@pytest.mark.parametrize("cls", RECORDS, ids=lambda c: c.__qualname__)
def test_each_record_behaves_as_its_dataclass(cls: Any) -> None:
    reference = twin(cls)
    first, second = stand_ins(cls)
    assert repr(first) == reference.__repr__(first)
    assert (first == second) is reference.__eq__(first, second)
    assert (first == stand_ins(cls)[0]) is reference.__eq__(first, stand_ins(cls)[0]) is True
    assert first.__eq__(object()) is NotImplemented
    if getattr(cls.__hash__, "__module__", "gpudiag.record") == "gpudiag.record":  # not its own
        assert cls.__hash__ is reference.__hash__ is None or hash(first) == reference.__hash__(
            first
        )
    assert cls.__match_args__ == reference.__match_args__
    if "__init__" in vars(cls) and cls.__init__.__module__ != "gpudiag.record":
        mine, theirs = inspect.signature(cls), inspect.signature(reference)  # written out
        assert mine.parameters == theirs.parameters
    assert [(f.name, f.default, f.default_factory, f.init, f.repr, f.compare, f.type)
            for f in dataclasses.fields(cls)] == [
        (f.name, f.default, f.default_factory, f.init, f.repr, f.compare, f.type)
        for f in dataclasses.fields(reference)
    ]  # fmt: skip
    if "__setattr__" in vars(cls):
        name, frozen = next(iter(cls.__record_fields__)), dataclasses.FrozenInstanceError
        with pytest.raises(frozen, match=f"cannot assign to field '{name}'"):
            setattr(first, name, 1)
        with pytest.raises(frozen, match=f"cannot delete field '{name}'"):
            delattr(first, name)


def test_no_dataclass_left_in_what_check_imports() -> None:
    """Every class the modules of `check` made a dataclass is a record, in RECORDS."""
    modules = {c.__module__ for c in RECORDS} | {"gpudiag.snapshot"}
    for name in modules:
        module = __import__(name, fromlist=["_"])
        made = [v for v in vars(module).values() if isinstance(v, type) and v.__module__ == name]
        assert not [c for c in made if dataclasses.is_dataclass(c) and c not in RECORDS]


def test_real_records_compare_hash_replace_and_asdict_as_dataclasses() -> None:
    """A judged snapshot's own readings, findings and probes, and the rules."""
    path = REPO / "tests" / "golden" / "rendered.json"
    judged = snapshot.load(path)
    again = snapshot.load(path)
    assert judged == again and judged is not again
    reading = next(r for p in judged.probes for r in p.readings if type(r.value) is int)
    for made in (judged.probes[0], judged.findings[0], reading, judged):
        reference = twin(type(made))
        assert repr(made) == reference.__repr__(made)
    for made in (judged.findings[0], reading):
        assert hash(made) == twin(type(made)).__hash__(made)
    assert dataclasses.asdict(reading) == {name: getattr(reading, name) for name in (
        "key", "value", "unit", "source", "status", "reason")}  # fmt: skip
    first = judged.probes[0]
    assert dataclasses.asdict(first)["readings"][0] == dataclasses.asdict(first.readings[0])
    assert dataclasses.replace(reading, unit="W") == model.Reading(
        reading.key, reading.value, "W", reading.source, reading.status, reading.reason
    )
    assert reading.__replace__(unit="W") == dataclasses.replace(reading, unit="W")
    changed = dataclasses.replace(judged, host="other")  # readings_by_key made again
    assert changed.host == "other" and changed.readings_by_key == judged.readings_by_key
    with pytest.raises(ValueError, match="init=False"):
        dataclasses.replace(judged, readings_by_key={})
    rules = rulefile.load_rules()
    assert rules == rulefile.load_rules() and rules[0] != rules[1]
    assert json.loads(json.dumps(dataclasses.asdict(rules[0]), default=str))["id"] == rules[0].id


def test_the_generic_init_binds_as_a_dataclass_does() -> None:
    """A record without its own __init__: positional, keyword, defaults, factories and
    init=False fields, and the same TypeErrors."""

    @record(frozen=False)
    class Mine:
        a: int
        b: str = "b"
        c: list[int] = field(default_factory=list)
        d: int = field(default=4, init=False, repr=False)

        def __post_init__(self) -> None:
            self.c.append(self.a)

    reference = twin(Mine)
    for args, kwargs in (((1,), {}), ((1, "x"), {}), ((), {"b": "y", "a": 2}), ((3,), {"c": [9]})):
        mine, theirs = Mine(*args, **kwargs), reference(*args, **kwargs)
        assert vars(mine) == vars(theirs) and list(vars(mine)) == list(vars(theirs))
        assert repr(mine) == reference.__repr__(theirs)
    assert Mine.__hash__ is None and Mine(1) == Mine(1) and Mine(1) != Mine(2)
    for args, kwargs, message in (
        ((), {}, "missing 1 required positional argument: 'a'"),
        ((1, "x", [], 5), {}, "positional arguments but 5 were given"),
        ((1,), {"a": 1}, "got multiple values for argument 'a'"),
        ((1,), {"d": 1}, "got an unexpected keyword argument 'd'"),
    ):
        with pytest.raises(TypeError, match=message):
            Mine(*args, **kwargs)
        with pytest.raises(TypeError, match=message):
            reference(*args, **kwargs)


def test_check_builds_no_dataclass(tmp_path: Any) -> None:
    """A `gpudiag check` process (as the command runs it) never imports dataclasses:
    its records are made without it (issue 44)."""
    rendered = str(REPO / "tests" / "golden" / "rendered.json")
    loaded = modules_loaded_by(
        "import os",
        "from gpudiag.entry import main",
        f"sys.argv, sys.stdout = ['gpudiag', 'check', {rendered!r}], open(os.devnull, 'w')",
        "assert main() in (0, 1, 2)",
        "sys.stdout = sys.__stdout__",
    )
    assert "gpudiag.ruleengine" in loaded and "dataclasses" not in loaded
