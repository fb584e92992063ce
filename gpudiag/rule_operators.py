"""The operators of the rules language, each defined once: what it needs of a value (a
number, a list, anything) and its test. The full evaluation (`compare`, which refuses a
value of the wrong type) and the quick path of the rule plan (`quick_check`, which sends
anything doubtful to the full evaluation) are both made from this one table.

`*_reading` and `*_profile` operators test like their base (`min_reading` like `min`),
against another reading or the GPU model's profile; `present` and `all_equal` are judged
by the engine itself (whether a reading exists; whether all GPUs agree).
"""

from __future__ import annotations

import operator as op
from collections.abc import Callable

from gpudiag.record import record

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from typing import Any


class RuleError(Exception):
    """A rule or profile file that cannot be used; str() is 'FILE:LINE: problem'."""


@record
class Operator:
    """One operator: what its value must be, and its test of a value against the
    expectation."""

    name: str
    needs: str  # "number", "list" or "" (anything)
    test: Callable[[Any, Any], bool]


_BASE = (
    Operator("equal", "", op.eq),
    Operator("not_equal", "", op.ne),
    Operator("in", "", lambda v, e: v in e),
    Operator("not_in", "", lambda v, e: v not in e),
    Operator("min", "number", op.ge),
    Operator("max", "number", op.le),
    Operator("between", "number", lambda v, e: e[0] <= v <= e[1]),
    Operator("subset_of", "list", lambda v, e: set(v) <= set(e)),
    Operator("excludes", "list", lambda v, e: not set(v) & set(e)),
    Operator("contains_any", "list", lambda v, e: bool(set(v) & set(e))),
    Operator("empty", "list", lambda v, e: not v),
)
_COMPARED = ("min", "max", "equal")  # the bases with a *_reading and a *_profile form

CONSTANT_OPERATORS = tuple(o.name for o in _BASE if o.name != "empty")
READING_OPERATORS = tuple(f"{b}_reading" for b in _COMPARED)
PROFILE_OPERATORS = tuple(f"{b}_profile" for b in _COMPARED)
OPERATORS = (
    "present",
    "empty",
    *CONSTANT_OPERATORS,
    *READING_OPERATORS,
    *PROFILE_OPERATORS,
    "all_equal",
)
_BY_NAME: dict[str, Operator] = {o.name: o for o in _BASE}
for _base in _COMPARED:
    for _form in ("reading", "profile"):
        _BY_NAME[f"{_base}_{_form}"] = _BY_NAME[_base]
# the operators whose quick check needs nothing but the value and a constant
QUICK_OPERATORS = frozenset({"present", *CONSTANT_OPERATORS, "empty"})


_NUMBERS = (int, float)  # exactly: a bool (or any subclass) goes to the full evaluation


def _always(value: Any) -> bool:
    return True


def compare(value: Any, operator: str, expected: Any) -> bool:
    """Whether a value meets an operator's expectation; TypeError for a value (or, for a
    comparison with another reading, an expectation) of the wrong type."""
    found = _BY_NAME.get(operator)
    if found is None:
        raise ValueError(f"no comparison for {operator}")
    if found.needs == "list" and not isinstance(value, list):
        raise TypeError(f"{value!r} is not a list")
    if found.needs == "number":
        numbers = [value, *(expected if operator == "between" else [expected])]
        if any(isinstance(n, bool) or not isinstance(n, int | float) for n in numbers):
            raise TypeError(f"{value!r} is not a number")
    return found.test(value, expected)


def quick_check(operator: str, operand: Any) -> Callable[[Any], bool]:
    """The rule plan's fast test of a value against a constant: True means it passes;
    False (a wrong type included) sends it to the full evaluation."""
    if operator == "present":
        return _always
    found = _BY_NAME[operator]
    test = found.test
    if found.needs == "number":
        numbers = _NUMBERS  # a local: the check runs for every instance of every snapshot
        return lambda v: type(v) in numbers and test(v, operand)
    if found.needs == "list":
        return lambda v: type(v) is list and test(v, operand)
    return lambda v: test(v, operand)


def _every_number(values: list[Any]) -> bool:
    return _NUMBER_TYPES.issuperset(map(type, values))


_NUMBER_TYPES = frozenset(_NUMBERS)


def all_pass(operator: str, operand: Any) -> Callable[[list[Any]], bool] | None:
    """A test of many read values at once, in C loops: True means each would pass
    `quick_check(operator, operand)`; False says nothing (test them one by one). None
    for an operator without one. A value of None (a reading not taken) never passes."""
    if operator == "present":
        return lambda values: None not in values
    if operator == "equal":  # operands are scalars from a rule file, never None or NaN
        return lambda values: values.count(operand) == len(values)
    if operator == "min":
        return lambda values: _every_number(values) and min(values) >= operand
    if operator == "max":
        return lambda values: _every_number(values) and max(values) <= operand
    if operator == "between":
        low, high = operand
        return lambda values: _every_number(values) and low <= min(values) and max(values) <= high
    return None
