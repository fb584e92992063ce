"""Records: the classes that `@dataclass` made for the modules `gpudiag check` imports,
made without building their methods at import.

`dataclasses` compiles each generated method (`__init__`, `__repr__`, `__eq__`,
`__hash__`, a frozen class's `__setattr__` and `__delattr__`) from source text when the
class is made: 0.4-1 ms a class on Python 3.11, about 10 ms of a `gpudiag check`
process's 64 ms at 8 GPUs for the 19 classes it imports (issue 44). `@record` gives a
class the same methods as closures over its field names: the same repr, equality, hash
and frozen-ness as `@dataclass(frozen=...)` (tests/test_record.py holds each class to
its dataclass twin), an `__init__` where the class does not write its own (a hot class
writes it: the generic one binds its arguments in a loop). `dataclasses.replace`,
`asdict`, `fields` and `is_dataclass` still work on a record: its
`__dataclass_fields__` is made, with `dataclasses` imported, on first use.
"""

from __future__ import annotations

from operator import attrgetter

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeVar

    T = TypeVar("T")

MISSING: Any = type("_Missing", (), {"__repr__": lambda self: "MISSING"})()
_new, _set = object.__new__, object.__setattr__


def _frozen(message: str) -> AttributeError:
    """dataclasses' FrozenInstanceError (an AttributeError), imported when one is made:
    `except dataclasses.FrozenInstanceError` catches a record's as a dataclass's."""
    from dataclasses import FrozenInstanceError

    return FrozenInstanceError(message)


class Field:
    """What `dataclasses.field` says of one field, for a record."""

    __slots__ = ("compare", "default", "default_factory", "init", "repr")

    def __init__(
        self,
        *,
        default: Any = MISSING,
        default_factory: Callable[[], Any] | Any = MISSING,
        init: bool = True,
        repr: bool = True,
        compare: bool = True,
    ) -> None:
        self.default = default
        self.default_factory = default_factory
        self.init = init
        self.repr = repr
        self.compare = compare


def field(**options: Any) -> Any:
    """A field with options, as `dataclasses.field` (default, default_factory, init,
    repr, compare)."""
    return Field(**options)


def record(cls: type[T] | None = None, /, *, frozen: bool = True) -> Any:
    """`@dataclass(frozen=...)` without compiling methods: the class's annotated names
    are its fields, in order, their class values (or `field(...)`) their defaults."""

    def wrap(cls: type[T]) -> type[T]:
        return _make(cls, frozen)

    return wrap if cls is None else wrap(cls)


def _make(cls: Any, frozen: bool) -> Any:
    specs: dict[str, Field] = {}
    own_annotations = cls.__dict__.get("__annotations__")  # noqa: RUF063 (no inspect)
    for name in cls.__annotations__ if own_annotations is None else own_annotations:
        value = cls.__dict__.get(name, MISSING)
        spec = value if isinstance(value, Field) else Field(default=value)
        if isinstance(value, Field):  # as dataclass: the default stays, a factory's goes
            if spec.default is MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, spec.default)
        specs[name] = spec
    cls.__record_fields__ = specs
    cls.__match_args__ = tuple(n for n, s in specs.items() if s.init)
    cls.__dataclass_fields__ = _DataclassFields()
    own = cls.__dict__
    if "__init__" not in own:
        cls.__init__ = _init(cls, specs)
    if "__replace__" not in own:  # copy.replace (Python 3.13), as a dataclass has it
        cls.__replace__ = replace
    if "__repr__" not in own:
        cls.__repr__ = _repr(tuple(n for n, s in specs.items() if s.repr))
    compared = _key(tuple(n for n, s in specs.items() if s.compare))
    if "__eq__" not in own:
        cls.__eq__ = _eq(compared)
    if "__hash__" not in own or own["__hash__"] is None:  # None: Python's, for __eq__
        if frozen:
            cls.__hash__ = lambda self: hash(compared(self))
        else:
            cls.__hash__ = None  # as dataclass: mutable and compared, so not hashable
    if frozen:
        names = frozenset(specs)

        def __setattr__(self: Any, name: str, value: Any) -> None:
            if type(self) is cls or name in names:
                raise _frozen(f"cannot assign to field {name!r}")
            _set(self, name, value)

        def __delattr__(self: Any, name: str) -> None:
            if type(self) is cls or name in names:
                raise _frozen(f"cannot delete field {name!r}")
            object.__delattr__(self, name)

        cls.__setattr__, cls.__delattr__ = __setattr__, __delattr__
    return cls


def _key(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """The tuple of these fields' values (what a dataclass's __eq__ and __hash__ take)."""
    if not names:
        return lambda item: ()
    if len(names) == 1:
        one = attrgetter(names[0])
        return lambda item: (one(item),)
    return attrgetter(*names)


def _eq(key: Callable[[Any], tuple[Any, ...]]) -> Callable[[Any, Any], Any]:
    def __eq__(self: Any, other: Any) -> Any:
        if other.__class__ is self.__class__:
            return key(self) == key(other)
        return NotImplemented

    return __eq__


def _repr(names: tuple[str, ...]) -> Callable[[Any], str]:
    def __repr__(self: Any) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
        return f"{self.__class__.__qualname__}({shown})"

    return __repr__


def _init(cls: Any, specs: dict[str, Field]) -> Callable[..., None]:
    """The generic __init__: the arguments bound to the fields as a dataclass's would be
    (positional in field order, then keywords, then the defaults), then __post_init__."""
    accepted = tuple(n for n, s in specs.items() if s.init)
    post_init = getattr(cls, "__post_init__", None)
    title = f"{cls.__qualname__}.__init__()"

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if len(args) > len(accepted):
            raise TypeError(
                f"{title} takes {len(accepted) + 1} positional arguments but"
                f" {len(args) + 1} were given"
            )
        given = dict(zip(accepted, args, strict=False))
        for name in kwargs:
            if name in given:
                raise TypeError(f"{title} got multiple values for argument {name!r}")
            if name not in specs or not specs[name].init:
                raise TypeError(f"{title} got an unexpected keyword argument {name!r}")
        given.update(kwargs)
        values = {}
        for name, spec in specs.items():
            if spec.init and name in given:
                values[name] = given[name]
            elif spec.default_factory is not MISSING:
                values[name] = spec.default_factory()
            elif not spec.init:
                continue  # its default is the class's (as a dataclass's is), or unset
            elif spec.default is not MISSING:
                values[name] = spec.default
            else:
                raise TypeError(f"{title} missing 1 required positional argument: {name!r}")
        _set(self, "__dict__", values)
        if post_init is not None:
            self.__post_init__()

    return __init__


class _DataclassFields:
    """A record's `__dataclass_fields__`, made on first use (it imports dataclasses):
    what `dataclasses.replace`, `asdict`, `fields` and `is_dataclass` read."""

    def __get__(self, item: Any, owner: Any) -> dict[str, Any]:
        import dataclasses

        made = {}
        for name, spec in owner.__record_fields__.items():
            made[name] = made_field = dataclasses.field(
                default=dataclasses.MISSING if spec.default is MISSING else spec.default,
                default_factory=(
                    dataclasses.MISSING if spec.default_factory is MISSING else spec.default_factory
                ),
                init=spec.init,
                repr=spec.repr,
                compare=spec.compare,
            )
            made_field.name = name
            made_field.type = owner.__annotations__[name]
            made_field._field_type = dataclasses._FIELD  # type: ignore[attr-defined]
        type.__setattr__(owner, "__dataclass_fields__", made)
        return made


def field_names(cls: type) -> tuple[str, ...]:
    """A record's fields' names, in order."""
    return tuple(cls.__record_fields__)  # type: ignore[attr-defined]


def replace(item: T, /, **changes: Any) -> T:
    """`dataclasses.replace` for a record: a new one with these fields changed (an
    init=False field is made again, by __init__ or __post_init__)."""
    for name, spec in type(item).__record_fields__.items():  # type: ignore[attr-defined]
        if not spec.init:
            if name in changes:
                raise ValueError(f"field {name} is declared with init=False, it cannot be"
                                 " specified with replace()")  # fmt: skip
            continue
        if name not in changes:
            changes[name] = getattr(item, name)
    return item.__class__(**changes)  # type: ignore[call-arg]


def as_dict(item: Any) -> dict[str, Any]:
    """A flat record's fields and values, in order (`dataclasses.asdict` of a record
    whose values are neither records nor containers)."""
    return {name: getattr(item, name) for name in type(item).__record_fields__}
