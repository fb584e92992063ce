"""rules/compiled.py, the shipped rule files parsed and checked ahead (gpudiag/rulefile.py):
it matches the TOML files as they are, loading gives the same rules from it as from the
TOML, and an edited rule file is read from its text, never from the stale entry.

After editing a rule file (or the rule checks), write the module again with
    GPUDIAG_UPDATE_GOLDEN=1 .venv/bin/python -m pytest -q tests/test_rules_compiled.py
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpudiag import rulefile
from gpudiag.rulefile import COMPILED_MODULE, compiled_module_text, load_rules, merge_rules

UPDATE = os.environ.get("GPUDIAG_UPDATE_GOLDEN") == "1"
REGENERATE = "GPUDIAG_UPDATE_GOLDEN=1 .venv/bin/python -m pytest -q tests/test_rules_compiled.py"


def test_the_compiled_module_is_the_rule_files_as_they_are() -> None:
    path = Path(rulefile._shipped_dir()) / COMPILED_MODULE
    expected = compiled_module_text()
    if UPDATE:
        path.write_text(expected, encoding="utf-8")
    assert path.is_file(), f"no {path}: write it with {REGENERATE}"
    assert path.read_text(encoding="utf-8") == expected, (
        f"rules/{COMPILED_MODULE} is stale (a rule file or the rule checks changed): "
        f"write it again with {REGENERATE}"
    )


def test_loading_from_the_compiled_module_gives_the_rules_the_toml_gives() -> None:
    compiled = rulefile._compiled()
    sources = rulefile.shipped_sources()
    assert sorted(compiled) == sorted(origin for origin, _ in sources)
    assert len(load_rules()) > 100  # not empty: every shipped rule
    assert load_rules() == merge_rules(sources)


def test_a_rule_file_edited_in_place_is_read_from_its_text(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # the shipped folder copied, one rule's severity changed: the compiled entry for
    # that file no longer matches, so its TOML is parsed; the other files still match
    folder = tmp_path / "rules"
    folder.mkdir()
    for origin, text in rulefile.shipped_sources():
        (folder / origin.removeprefix("rules/")).write_text(text, encoding="utf-8")
    node = folder / "node.toml"
    text = node.read_text(encoding="utf-8")
    first = text.index('severity = "')
    end = text.index('"', first + len('severity = "'))
    old = text[first + len('severity = "') : end]
    new = "info" if old != "info" else "warning"
    node.write_text(text[:first] + f'severity = "{new}"' + text[end + 1 :], encoding="utf-8")
    monkeypatch.setattr(rulefile, "_shipped_dir", lambda: folder)
    parsed_from_toml = []
    real_parse = rulefile.parse_rule_file

    def parse(text: str, origin: str) -> object:
        parsed_from_toml.append(origin)
        return real_parse(text, origin)

    monkeypatch.setattr(rulefile, "parse_rule_file", parse)
    rules = load_rules()
    assert parsed_from_toml == ["rules/node.toml"]
    edited = next(r for r in rules if r.origin.startswith("rules/node.toml"))
    assert edited.severity.value == new


def test_without_the_compiled_module_every_file_is_parsed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(rulefile, "_compiled", dict)
    assert load_rules() == merge_rules(rulefile.shipped_sources())


def test_a_module_made_for_other_rule_fields_is_not_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gpudiag.rules import compiled

    assert rulefile._compiled()  # read as it is
    monkeypatch.setattr(compiled, "FIELDS", (*rulefile._RULE_FIELDS, "new_field"))
    assert rulefile._compiled() == {}
    assert load_rules() == merge_rules(rulefile.shipped_sources())


def test_the_compiled_profiles_are_the_profiles_the_toml_gives() -> None:
    from gpudiag import profiles

    text = Path(profiles.shipped_profiles_path()).read_text(encoding="utf-8")
    compiled = profiles._compiled_profiles(text)
    assert compiled is not None, f"rules/{COMPILED_MODULE} holds no profiles: {REGENERATE}"
    parsed = profiles.parse_profiles(text, profiles.PROFILES_ORIGIN)
    assert len(parsed) > 5
    assert list(compiled) == list(parsed)  # in the file's order: the first match wins
    assert compiled == parsed
    profiles._shipped_profiles.cache_clear()
    try:
        assert profiles.load_profiles() == parsed
    finally:
        profiles._shipped_profiles.cache_clear()


def test_an_edited_profiles_file_is_read_from_its_text(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from gpudiag import profiles

    text = Path(profiles.shipped_profiles_path()).read_text(encoding="utf-8")
    edited = tmp_path / "profiles.toml"
    edited.write_text(text.replace("power_limit_w = 700", "power_limit_w = 701", 1))
    assert edited.read_text() != text
    assert profiles._compiled_profiles(edited.read_text()) is None
    monkeypatch.setattr(profiles, "shipped_profiles_path", lambda: edited)
    profiles._shipped_profiles.cache_clear()
    try:
        loaded = profiles.load_profiles()
    finally:
        profiles._shipped_profiles.cache_clear()
    assert loaded == profiles.parse_profiles(edited.read_text(), "p.toml")
    assert 701 in [p.values.get("power_limit_w") for p in loaded.values()]
