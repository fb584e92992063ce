"""Rule files: the rules language, parsing and checking rule files, site overrides, lint.

Rules are data. Each `[[rule]]` names one reading (a key template) and one expectation
from a closed set of operators; nothing in a rule file is ever evaluated as code, and a
string that reaches for Python internals (`__`) is refused when the file is loaded.

    [[rule]]
    id = "PCIE001"                # stable, never reused
    severity = "warning"          # critical | warning | info
    status = "stable"             # stable | preview | deprecated
    title = "GPU PCIe link narrower than its maximum"
    applies_to = "gpu"            # a subject of gpudiag/catalog.py: see below
    reading = "gpu.{gpu}.pcie.link_width"
    expect = { min_reading = "gpu.{gpu}.pcie.max_link_width" }
    message = "GPU {gpu} PCIe link x{value} of x{expected}"
    why = "..."
    fix = "..."
    example = "gpu.3.pcie.link_width = 8 with max_link_width = 16"
    references = ["https://..."]
    action = "reset"              # optional: none | monitor | reset | reboot | drain | service

`applies_to` names a subject of gpudiag/catalog.py (SUBJECTS), and the placeholders of
`reading` are that subject's: none for node, `{gpu}` for gpu, `{gpu}` and `{link}` for
nvlink, `{gpu}` and `{peer}` for gpu_pair, `{device}` (a PCI address) for pcie_device,
`{node}` for numa_node, `{hca}` and `{port}` for ib_port, `{ctrl}` for nvme. Every key a
rule reads must be declared there by some producer (`rules lint` refuses it otherwise).
A rule is checked for every instance its scope has in the readings (every GPU, for gpu
rules, even one with no such reading, unless `if_present = true`: then only where the
reading exists, for readings that only some nodes have, like the GPU-to-NIC topology).

`applies_if = { reading = "KEY", equal = V }` (or `{ profile = "FIELD", equal = V }`,
a GPU-class flag such as `ecc` or `persistence_mode`) limits a rule to where that holds:
where the reading or profile field is known and differs, the rule gives a
`not-applicable` finding; where it is not known, the rule applies. A list of such
tables limits it to where all hold.

Operators (`expect` holds exactly one):
- present = true: the reading was taken.
- equal, not_equal, in, not_in, min, max, between = [lo, hi]: the value against constants.
- subset_of = [...]: every item of a list reading is allowed; excludes = [...]: none is;
  contains_any = [...]: at least one is there; empty = true: the list is empty.
- min_reading, max_reading, equal_reading = "key template": against another reading.
- min_profile, max_profile, equal_profile = "field": against the GPU model's profile
  (`factor = 0.85` scales the other side of the *_reading and *_profile comparisons).
- all_equal = true: a node rule over `gpu.{gpu}...`: the same value on every GPU.

A rule fires when the reading does not meet the expectation. A reading the device says
it does not support (ECC on a GeForce card) is not judged: the rule does not apply there
(a `not-applicable` finding, counted apart). Evidence that is absent or
could not be read gives an `unknown` finding that says which and why (an info rule's
stays info: it cannot hide a problem). Evidence that none of the snapshot's sources can
hold (a host reading in an nvidia-smi import; gpudiag.catalog says which source holds
what) gives a `not-applicable` finding instead: shown apart, never counted as unknown,
never setting the exit code. The `present` operator fires with the rule's own
severity when the reading was attempted and failed; when no probe produced it at all
(an import of a partial file), that is unknown like any missing evidence. A profile
comparison is skipped where no profile applies or the profile leaves that field out
(a PCIe card's NVLink count depends on its bridges); PROF001 says when no profile
matched. Messages may use {value} {unit} {reason} {key} {expected} {threshold} (what
{expected} is before the rule's `factor`) {source} (where a
*_profile rule's figure comes from: the profile's source of the field) and the scope's
placeholders, substituted as plain text; {s} is 's' unless the value is 1 ('{value}
row{s}'). A rule's `fix` may use the scope's placeholders (`nvidia-smi -pm 1 -i {gpu}`).

Actions: every finding recommends one action from a closed set (model.Action), weakest
first: none, monitor, reset (the GPU), reboot, drain (the node), service (RMA). A rule
says which with `action`; where it says nothing, a critical finding recommends drain, a
warning monitor, an info finding none. Warnings never drain a node: a warning's drain or
service (after an override lowered a rule's severity) becomes monitor. Unknown and info
findings recommend none: they are no verdict on the hardware.

`gpu_models = ["0x2330"]` (PCI device ids) limits a rule to nodes with a GPU of one of
these models: a site's expected values differ per model (`gpudiag baseline` writes them).

Site rules: any rule file may also hold `[[override]]` tables, `id` plus `severity`,
`action` and/or `disabled = true`, which apply to a rule loaded before them (by id).
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Sequence

from gpudiag import catalog
from gpudiag.inputs import (
    InputError,
    compiled_module,
    parse_data,
    read_input,
    text_fingerprint,
)
from gpudiag.model import Action, Severity
from gpudiag.profiles import PROFILE_FLAGS, READABLE_FIELDS
from gpudiag.record import field_names, record, replace
from gpudiag.rule_operators import OPERATORS, PROFILE_OPERATORS, READING_OPERATORS, RuleError

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

SCOPES: dict[str, tuple[str, ...]] = catalog.scopes()  # the catalog's subjects
_PLACEHOLDERS = {name for names in SCOPES.values() for name in names}
RULE_KEYS = {
    "id",
    "severity",
    "status",
    "title",
    "applies_to",
    "reading",
    "expect",
    "factor",
    "message",
    "why",
    "fix",
    "example",
    "references",
    "if_present",
    "action",
    "applies_if",
    "gpu_models",
}
OVERRIDE_KEYS = {"id", "severity", "disabled", "action"}
DEFAULT_ACTIONS = {
    Severity.CRITICAL: Action.DRAIN,
    Severity.WARNING: Action.MONITOR,
    Severity.INFO: Action.NONE,
    Severity.UNKNOWN: Action.NONE,
}
_ACTION_NAMES = ", ".join(a.value for a in Action)
REQUIRED_KEYS = ("id", "severity", "title", "applies_to", "reading", "expect", "why", "fix")
_ID_PATTERN = re.compile(r"^[A-Z]{2,8}[0-9]{3}$")
_KEY_TEMPLATE = re.compile(r"^[A-Za-z0-9_.:{}\-]+$")
MESSAGE_FIELD = re.compile(r"\{([a-z_]+)\}")
# {threshold}: what {expected} is before the rule's factor (a slowdown temperature where
# {expected} is 95% of it)
MESSAGE_FIELDS = {
    "value",
    "unit",
    "reason",
    "key",
    "expected",
    "threshold",
    "source",
    "s",
    *_PLACEHOLDERS,
}
# rules/ files that hold no rules (telemetry.toml: the bound-by thresholds)
DATA_FILES = {"profiles.toml", "explanations.toml", "telemetry.toml"}
# (text, not Path: a `check` without site rules does not import pathlib for them)
DEFAULT_SITE_DIRS = ("/etc/gpudiag/rules.d", "~/.config/gpudiag/rules.d")


@record
class Rule:
    """One loaded rule."""

    id: str
    severity: Severity
    title: str
    applies_to: str
    reading: str
    operator: str
    operand: Any
    why: str
    fix: str
    message: str = ""
    status: str = "stable"
    references: tuple[str, ...] = ()
    origin: str = ""
    factor: float = 1.0
    example: str = ""
    disabled: bool = False
    if_present: bool = False
    action: Action | None = None  # None: the default for the severity (DEFAULT_ACTIONS)
    applies_if: tuple[tuple[str, str, Any], ...] = ()  # (reading|profile, key or field, equal)
    gpu_models: tuple[str, ...] = ()  # PCI device ids; empty: every model


@functools.cache  # a closed set of arguments; every finding asks
def action_for(severity: Severity, declared: Action | None) -> Action:
    """The action a finding of this severity recommends, given the rule's declared one:
    the default where the rule says nothing; none for unknown, info and not-applicable
    findings; at most monitor for a warning (warnings never drain a node)."""
    if severity in (Severity.UNKNOWN, Severity.INFO, Severity.NOT_APPLICABLE):
        return Action.NONE
    action = DEFAULT_ACTIONS[severity] if declared is None else declared
    if severity is Severity.WARNING and action.rank >= Action.DRAIN.rank:
        return Action.MONITOR
    return action


def _check_action(table: dict[str, Any], where: str) -> Action | None:
    if "action" not in table:
        return None
    value = table["action"]
    if value not in {a.value for a in Action}:
        raise RuleError(f"{where}: action must be one of {_ACTION_NAMES}")
    return Action(value)


# ------------------------------------------------------------------ loading


def _table_lines(text: str, header: str) -> list[int]:
    """1-based line numbers of each `[[header]]`, in order."""
    return [i + 1 for i, line in enumerate(text.splitlines()) if line.strip() == f"[[{header}]]"]


def _refuse_internals(value: Any, where: str) -> None:
    """Rule files are data: no string may reach for Python internals."""
    if isinstance(value, str) and "__" in value:
        raise RuleError(f"{where}: '__' is not allowed in rule files (they are data, not code)")
    if isinstance(value, (list, tuple)):
        for item in value:
            _refuse_internals(item, where)
    if isinstance(value, dict):
        for key, item in value.items():
            _refuse_internals(key, where)
            _refuse_internals(item, where)


def _placeholders(template: str) -> set[str]:
    return set(re.findall(r"\{([a-z]+)\}", template))


def _check_expectation(table: dict[str, Any], where: str) -> tuple[str, Any]:
    expect = table["expect"]
    if not isinstance(expect, dict) or len(expect) != 1:
        raise RuleError(f"{where}: expect must be a table with exactly one operator")
    ((operator, operand),) = expect.items()
    if operator not in OPERATORS:
        raise RuleError(f"{where}: unknown operator '{operator}' (known: {', '.join(OPERATORS)})")
    scalar = (bool, int, float, str)
    number = (int, float)
    if operator in ("present", "all_equal", "empty") and operand is not True:
        raise RuleError(f"{where}: '{operator}' takes true")
    if operator in ("equal", "not_equal") and not isinstance(operand, scalar):
        raise RuleError(f"{where}: '{operator}' takes a string, number or boolean")
    if operator in ("in", "not_in", "subset_of", "excludes", "contains_any") and not (
        isinstance(operand, list) and operand and all(isinstance(v, scalar) for v in operand)
    ):
        raise RuleError(f"{where}: '{operator}' takes a non-empty list of values")
    if operator in ("min", "max") and (
        isinstance(operand, bool) or not isinstance(operand, number)
    ):
        raise RuleError(f"{where}: '{operator}' takes a number")
    if operator == "between" and not (
        isinstance(operand, list)
        and len(operand) == 2
        and all(isinstance(v, number) and not isinstance(v, bool) for v in operand)
        and operand[0] <= operand[1]
    ):
        raise RuleError(f"{where}: 'between' takes [low, high]")
    if operator in READING_OPERATORS:
        if not isinstance(operand, str) or not _KEY_TEMPLATE.match(operand):
            raise RuleError(f"{where}: '{operator}' takes a reading key")
        if _placeholders(operand) - set(SCOPES[table["applies_to"]]):
            raise RuleError(f"{where}: '{operator}' uses placeholders its scope does not have")
    if operator in PROFILE_OPERATORS and operand not in READABLE_FIELDS:
        raise RuleError(
            f"{where}: '{operator}' takes a profile field ({', '.join(sorted(READABLE_FIELDS))})"
        )
    if "factor" in table:
        factor = table["factor"]
        if operator not in (*READING_OPERATORS, *PROFILE_OPERATORS):
            raise RuleError(f"{where}: 'factor' goes with *_reading and *_profile operators")
        if isinstance(factor, bool) or not isinstance(factor, number) or factor <= 0:
            raise RuleError(f"{where}: 'factor' must be a positive number")
    return operator, operand


def _check_applies_if(table: Any, scope: str, where: str) -> tuple[tuple[str, str, Any], ...]:
    """`applies_if = { reading = "KEY", equal = V }` or `{ profile = "FIELD", equal = V }`:
    the rule does not apply where that reading (or the GPU model's profile field) is
    known and differs (persistence mode on a workstation card). Unknown: it applies.
    A list of such tables: the rule applies where every one holds."""
    if isinstance(table, list) and table:
        return tuple(c for t in table for c in _check_applies_if(t, scope, where))
    if table == {}:
        return ()
    if not isinstance(table, dict) or set(table) not in (
        {"reading", "equal"},
        {"profile", "equal"},
    ):
        raise RuleError(
            f"{where}: applies_if is {{ reading = KEY, equal = V }} or "
            "{ profile = FIELD, equal = V }"
        )
    equal = table["equal"]
    if not isinstance(equal, (bool, int, float, str)):
        raise RuleError(f"{where}: applies_if's equal takes a string, number or boolean")
    if "reading" in table:
        key = table["reading"]
        if not isinstance(key, str) or not _KEY_TEMPLATE.match(key):
            raise RuleError(f"{where}: applies_if's reading must be a key")
        if _placeholders(key) - set(SCOPES[scope]):
            raise RuleError(f"{where}: applies_if uses placeholders its scope does not have")
        return (("reading", key, equal),)
    if table["profile"] not in READABLE_FIELDS | PROFILE_FLAGS:
        raise RuleError(f"{where}: applies_if's profile is a profile field")
    return (("profile", table["profile"], equal),)


def _check_rule(table: Any, where: str) -> Rule:
    if not isinstance(table, dict):
        raise RuleError(f"{where}: a rule must be a table")
    if isinstance(table.get("id"), str):
        where += f": rule {table['id']}"
    unknown = set(table) - RULE_KEYS
    if unknown:
        raise RuleError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    for key in REQUIRED_KEYS:
        if key not in table:
            raise RuleError(f"{where}: missing key '{key}'")
    for key in (
        "id",
        "severity",
        "title",
        "applies_to",
        "reading",
        "why",
        "fix",
        "message",
        "status",
        "example",
    ):
        if key in table and not isinstance(table[key], str):
            raise RuleError(f"{where}: '{key}' must be a string")
    _refuse_internals(table, where)
    if not _ID_PATTERN.match(table["id"]):
        raise RuleError(f"{where}: id must look like PCIE001 (letters, then 3 digits)")
    if table["severity"] not in ("critical", "warning", "info"):
        raise RuleError(f"{where}: severity must be critical, warning or info")
    if table.get("status", "stable") not in ("stable", "preview", "deprecated"):
        raise RuleError(f"{where}: status must be stable, preview or deprecated")
    scope = table["applies_to"]
    if scope not in SCOPES:
        raise RuleError(f"{where}: applies_to must be one of {', '.join(SCOPES)}")
    reading = table["reading"]
    if not _KEY_TEMPLATE.match(reading):
        raise RuleError(f"{where}: reading must be a key such as gpu.{{gpu}}.pcie.link_width")
    wanted = set(SCOPES[scope])
    if table.get("expect") == {"all_equal": True}:
        if scope != "node" or _placeholders(reading) != {"gpu"}:
            raise RuleError(f"{where}: all_equal is a node rule over a gpu.{{gpu}} reading")
    elif _placeholders(reading) != wanted:
        names = ", ".join(f"{{{n}}}" for n in SCOPES[scope]) or "no placeholder"
        raise RuleError(f"{where}: a {scope} rule's reading has {names}")
    for name in MESSAGE_FIELD.findall(table.get("message", "")):
        if name not in MESSAGE_FIELDS:
            raise RuleError(
                f"{where}: message field {{{name}}} is not one of "
                f"{', '.join(sorted(MESSAGE_FIELDS))}"
            )
    for name in MESSAGE_FIELD.findall(table["fix"]):
        if name not in SCOPES[scope]:
            raise RuleError(
                f"{where}: fix field {{{name}}} is not one of the scope's "
                f"({', '.join(SCOPES[scope]) or 'none'})"
            )
    operator, operand = _check_expectation(table, where)
    if not isinstance(table.get("if_present", False), bool):
        raise RuleError(f"{where}: if_present must be true or false")
    action = _check_action(table, where)
    if action is not None and action.rank >= Action.DRAIN.rank and table["severity"] != "critical":
        raise RuleError(f"{where}: only a critical rule may recommend {action.value}")
    applies_if = _check_applies_if(table.get("applies_if", {}), scope, where)
    references = table.get("references", [])
    if not isinstance(references, list) or not all(isinstance(r, str) for r in references):
        raise RuleError(f"{where}: references must be a list of strings")
    models = table.get("gpu_models", [])
    if not isinstance(models, list) or not all(
        isinstance(m, str) and re.fullmatch(r"0x[0-9a-f]{4}", m) for m in models
    ):
        raise RuleError(f"{where}: gpu_models are PCI device ids like '0x2330'")
    return Rule(
        id=table["id"],
        severity=Severity(table["severity"]),
        title=table["title"],
        applies_to=scope,
        reading=reading,
        operator=operator,
        operand=operand,
        why=table["why"],
        fix=table["fix"],
        message=table.get("message", ""),
        status=table.get("status", "stable"),
        references=tuple(references),
        origin=where,
        factor=float(table.get("factor", 1.0)),
        example=table.get("example", ""),
        if_present=table.get("if_present", False),
        action=action,
        applies_if=applies_if,
        gpu_models=tuple(models),
    )


def parse_rule_file(
    text: str, origin: str, errors: list[str] | None = None
) -> tuple[list[Rule], list[tuple[dict[str, Any], str]]]:
    """Rules and overrides of one file; raises RuleError naming the file and line.
    NaN and infinity are refused; control characters are removed from its strings. With
    `errors` (`rules lint`), a broken rule or override is added there and left out, so
    that every one is reported; the file's own shape still raises."""
    try:
        data = parse_data(text, origin, as_json=False)  # every string printable
        return _rules_of(data, text, origin, errors)
    except InputError as exc:
        raise RuleError(str(exc)) from None
    except RecursionError:
        raise RuleError(f"{origin}: nested too deeply") from None


def _collect(errors: list[str] | None, exc: RuleError) -> None:
    """Raise `exc`, or (linting) add it to `errors` and go on."""
    if errors is None:
        raise exc
    errors.append(str(exc))


def _rules_of(
    data: dict[str, Any], text: str, origin: str, errors: list[str] | None = None
) -> tuple[list[Rule], list[tuple[dict[str, Any], str]]]:
    extra = set(data) - {"rule", "override"}
    if extra:
        raise RuleError(f"{origin}: unknown top-level key(s) {', '.join(sorted(extra))}")
    rules = []
    for name in ("rule", "override"):
        if not isinstance(data.get(name, []), list):
            raise RuleError(f"{origin}: '{name}' must be an array of tables ([[{name}]])")
    lines = _table_lines(text, "rule")
    for index, table in enumerate(data.get("rule", [])):
        line = lines[index] if index < len(lines) else 0
        try:
            rules.append(_check_rule(table, f"{origin}:{line}" if line else origin))
        except RuleError as exc:
            _collect(errors, exc)
    overrides = []
    lines = _table_lines(text, "override")
    for index, table in enumerate(data.get("override", [])):
        where = f"{origin}:{lines[index]}" if index < len(lines) else origin
        try:
            _check_override(table, where)
        except RuleError as exc:
            _collect(errors, exc)
            continue
        overrides.append((table, where))
    return rules, overrides


def _check_override(table: Any, where: str) -> None:
    """An [[override]] table's keys and values; RuleError naming what is wrong."""
    if not isinstance(table, dict) or not isinstance(table.get("id"), str):
        raise RuleError(f"{where}: an override needs the id of the rule it changes")
    unknown = set(table) - OVERRIDE_KEYS
    if unknown:
        raise RuleError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    if "severity" in table and table["severity"] not in ("critical", "warning", "info"):
        raise RuleError(f"{where}: severity must be critical, warning or info")
    if "disabled" in table and not isinstance(table["disabled"], bool):
        raise RuleError(f"{where}: disabled must be true or false")
    _check_action(table, where)


def parse_rules(text: str, origin: str) -> list[Rule]:
    """The rules of one file's text (overrides are applied by load_rules)."""
    return parse_rule_file(text, origin)[0]


def read_rule_file(path: Path) -> str:
    """The text of one rule file: a regular file, bounded (gpudiag.inputs), UTF-8."""
    try:
        data = read_input(path)
    except InputError as exc:
        raise RuleError(str(exc)) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RuleError(f"{path}: not UTF-8 text (binary?) at byte {exc.start}") from None


def _shipped_dir() -> str:
    """The folder of the shipped rule files (the `gpudiag.rules` package, on disk): its
    path as text (os.path: `check` does not import pathlib for it)."""
    import gpudiag.rules

    return os.path.dirname(gpudiag.rules.__file__)


def shipped_sources() -> list[tuple[str, str]]:
    """(origin, text) of every shipped rule file, by name."""
    folder = _shipped_dir()
    return [
        (f"rules/{name}", _read_text(os.path.join(folder, name)))
        for name in sorted(os.listdir(folder))
        if name.endswith(".toml") and name not in DATA_FILES
    ]


def _read_text(path: str) -> str:
    """A shipped file's text (what Path.read_text(encoding='utf-8') gives)."""
    with open(path, encoding="utf-8") as file:
        return file.read()


# ------------------------------------------------------------------ the compiled rules

# rules/compiled.py: every shipped rule file's rules, checked and flattened into Python
# literals (a parse of the TOML and its checks cost about as much as the rest of
# `gpudiag check`). Each file's entry holds the fingerprint of the text it was made from;
# a file whose text differs (edited in place) is parsed from its TOML as before, so an
# edited rule file is never misread. tests/test_rules_compiled.py fails when the module
# is stale and says the one command that writes it again.
COMPILED_MODULE = "compiled.py"
_RULE_FIELDS = field_names(Rule)


def _plain_rule(rule: Rule) -> tuple[Any, ...]:
    """A checked rule as plain literals, in Rule's field order (enums by value)."""
    values = []
    for name in _RULE_FIELDS:
        value = getattr(rule, name)
        values.append(value.value if isinstance(value, (Severity, Action)) else value)
    return tuple(values)


def _rule_of_plain(values: tuple[Any, ...]) -> Rule:
    """The rule `_plain_rule` flattened."""
    fields = dict(zip(_RULE_FIELDS, values, strict=True))
    fields["severity"] = Severity(fields["severity"])
    if fields["action"] is not None:
        fields["action"] = Action(fields["action"])
    return Rule(**fields)


def compiled_module_text(sources: Sequence[tuple[str, str]] | None = None) -> str:
    """The text of rules/compiled.py for these (origin, text) shipped files (default: the
    files in rules/ now), each parsed and checked as `parse_rule_file` does, and the
    shipped rules/profiles.toml's profiles (gpudiag/profiles.py)."""
    import pprint

    from gpudiag.profiles import compiled_profiles, shipped_profiles_path

    profiles_text = _read_text(shipped_profiles_path())
    entries = {}
    for origin, text in shipped_sources() if sources is None else sources:
        rules, overrides = parse_rule_file(text, origin)
        entries[origin] = (
            text_fingerprint(text),
            tuple(_plain_rule(r) for r in rules),
            tuple((table, where) for table, where in overrides),
        )
    return (
        '"""The shipped rule files, parsed and checked (gpudiag/rulefile.py, COMPILED_MODULE).\n\n'
        "Generated: do not edit. After editing a rule file, write it again with\n"
        "    GPUDIAG_UPDATE_GOLDEN=1 .venv/bin/python -m pytest -q tests/test_rules_compiled.py\n"
        'A file whose text no longer matches its fingerprint is parsed from its TOML.\n"""\n'
        "\n"
        "# Rule's fields, in the order each rule below lists them\n"
        f"FIELDS = {pprint.pformat(_RULE_FIELDS, width=100)}\n"
        f"FILES = {pprint.pformat(entries, width=100, sort_dicts=False)}\n"
        "# rules/profiles.toml (gpudiag/profiles.py): (fingerprint, Profile's fields, profiles)\n"
        f"PROFILES = {pprint.pformat(compiled_profiles(profiles_text), width=100)}\n"
    )


def _compiled() -> dict[str, Any]:
    """rules/compiled.py's FILES, or {} when it cannot be loaded (missing, truncated,
    damaged) or was made for other fields of Rule (every file is then parsed from its
    TOML)."""
    compiled = compiled_module("gpudiag.rules.compiled")  # None: missing or damaged
    files = getattr(compiled, "FILES", None)
    if getattr(compiled, "FIELDS", None) != _RULE_FIELDS or not isinstance(files, dict):
        return {}  # made for another Rule (a field added or moved since): parse the TOML
    return files


def _parsed_shipped() -> list[tuple[list[Rule], list[tuple[dict[str, Any], str]]]]:
    """Every shipped rule file's rules and overrides: from the compiled module where the
    file's text is the one compiled, else parsed from the TOML."""
    compiled = _compiled()
    parsed = []
    for origin, text in shipped_sources():
        entry = compiled.get(origin)
        if entry is not None and tuple(entry[0]) == text_fingerprint(text):
            rules = [_rule_of_plain(values) for values in entry[1]]
            overrides = [(dict(table), where) for table, where in entry[2]]
            parsed.append((rules, overrides))
        else:
            parsed.append(parse_rule_file(text, origin))
    return parsed


def load_rules(directories: Sequence[Path] = (), site: bool = False) -> list[Rule]:
    """The shipped rules, then every `*.toml` in `directories` (and, with `site`, in
    /etc/gpudiag/rules.d and ~/.config/gpudiag/rules.d), by file name. Rule ids must be
    unique; `[[override]]` tables change a rule already loaded."""
    parsed = _parsed_shipped()
    folders = list(directories)
    if site and any(os.path.isdir(os.path.expanduser(d)) for d in DEFAULT_SITE_DIRS):
        from pathlib import Path

        folders = [
            Path(os.path.expanduser(d))
            for d in DEFAULT_SITE_DIRS
            if Path(os.path.expanduser(d)).is_dir()
        ] + folders
    for directory in folders:
        if not directory.is_dir():
            raise RuleError(f"{directory}: not a directory of rule files")
        for path in sorted(directory.glob("*.toml")):
            parsed.append(parse_rule_file(read_rule_file(path), str(path)))
    return _merged(parsed)


def merge_rules(sources: Sequence[tuple[str, str]]) -> list[Rule]:
    """The rules of these (origin, text) files in order, overrides applied: the one
    path both loading and `gpudiag rules lint` take."""
    return _merged([parse_rule_file(text, origin) for origin, text in sources])


def _merged(
    parsed: Sequence[tuple[list[Rule], list[tuple[dict[str, Any], str]]]],
    errors: list[str] | None = None,
) -> list[Rule]:
    """The rules of parsed files in order, overrides applied (ids unique); with `errors`,
    each duplicate and each override of an unknown rule is added there, and left out."""
    rules: dict[str, Rule] = {}
    for new_rules, overrides in parsed:
        for rule in new_rules:
            if rule.id in rules:
                first = rules[rule.id].origin
                origin = rule.origin
                hint = (
                    "; to change a shipped rule use [[override]]"
                    if first.startswith("rules/") and not origin.startswith("rules/")
                    else ""
                )
                message = f"{rule.origin}: duplicate id, first defined at {first}{hint}"
                _collect(errors, RuleError(message))
                continue
            rules[rule.id] = rule
        for table, where in overrides:
            if table["id"] not in rules:
                _collect(errors, RuleError(f"{where}: override of unknown rule {table['id']}"))
                continue
            rule = rules[table["id"]]
            rules[rule.id] = replace(
                rule,
                severity=Severity(table.get("severity", rule.severity.value)),
                disabled=bool(table.get("disabled", rule.disabled)),
                action=Action(table["action"]) if "action" in table else rule.action,
            )
    return list(rules.values())


def lint_data_file(path: Path) -> str | None:
    """Check one of the shipped data files in rules/ (the GPU profiles, the diff's
    explanations) as gpudiag reads it: what it holds in words, or None for any other file;
    RuleError where it is broken."""
    from pathlib import Path

    shipped_dir = Path(_shipped_dir()).resolve()
    if path.name not in DATA_FILES or path.resolve().parent != shipped_dir:
        return None
    text = read_rule_file(path)
    if path.name == "profiles.toml":
        from gpudiag.profiles import parse_profiles

        return f"{len(parse_profiles(text, str(path)))} profiles"
    if path.name == "telemetry.toml":
        from gpudiag.telemetry.verdicts import ThresholdError, parse_thresholds

        try:
            return f"{len(parse_thresholds(text, str(path)))} bound-by thresholds"
        except ThresholdError as exc:
            raise RuleError(str(exc)) from None
    from gpudiag.diff import parse_explanations

    return f"{len(parse_explanations(text, str(path)))} explanations"


def lint_rule_file(path: Path) -> tuple[int, int, list[str]]:
    """Check one rule file as loading it beside the shipped rules would (a shipped file
    in place of itself): (rules, overrides) it holds and every error found, in the file's
    order (a file that cannot be read or parsed at all: RuleError)."""
    text = read_rule_file(path)
    errors: list[str] = []
    rules, overrides = parse_rule_file(text, str(path), errors)
    from gpudiag.shipped import catalog as shipped_catalog

    sources = shipped_sources()
    from pathlib import Path

    shipped_dir = Path(_shipped_dir()).resolve()
    if path.resolve().parent == shipped_dir:
        sources = [(o, t) for o, t in sources if o != f"rules/{path.name}"]
    _merged([*(parse_rule_file(t, o) for o, t in sources), (rules, overrides)], errors)
    for rule in rules:
        for key in read_keys(rule):
            if not shipped_catalog().covers(key):
                errors.append(
                    f"{rule.origin}: reads {key}, which no probe, importer or derivation "
                    "declares (gpudiag/catalog.py)"
                )
    return len(rules), len(overrides), sorted(errors, key=_line_of)


def _line_of(error: str) -> tuple[str, int]:
    """An error's place in its file ('site.toml:12: ...'), for the file's order."""
    origin, _, rest = error.partition(":")
    line = rest.partition(":")[0]
    return origin, int(line) if line.isdigit() else 0


def read_keys(rule: Rule) -> list[str]:
    """The key templates a rule reads: its reading, another reading it compares with,
    and those its applies_if looks at."""
    keys = [rule.reading]
    if rule.operator in READING_OPERATORS:
        keys.append(str(rule.operand))
    keys.extend(str(name) for kind, name, _ in rule.applies_if if kind == "reading")
    return keys
