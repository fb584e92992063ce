"""gpudiag/shipped_compiled.py, the shipped catalog's declarations compiled (gpudiag/shipped.py):
it matches what the producers declare now, the catalog read from it is the one built
from them, and a changed declaring file makes the catalog be built, never read stale.

After changing a producer's declarations, write the module again with
    GPUDIAG_UPDATE_GOLDEN=1 .venv/bin/python -m pytest -q tests/test_shipped_compiled.py
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpudiag import shipped

from conftest import modules_loaded_by

UPDATE = os.environ.get("GPUDIAG_UPDATE_GOLDEN") == "1"
REGENERATE = "GPUDIAG_UPDATE_GOLDEN=1 .venv/bin/python -m pytest -q tests/test_shipped_compiled.py"


def test_the_compiled_module_is_the_catalog_as_declared() -> None:
    path = Path(shipped.__file__).with_name(shipped.COMPILED_MODULE)
    expected = shipped.compiled_module_text()
    if UPDATE:
        path.write_text(expected, encoding="utf-8")
    assert path.is_file(), f"no {path}: write it with {REGENERATE}"
    assert path.read_text(encoding="utf-8") == expected, (
        f"gpudiag/{shipped.COMPILED_MODULE} is stale (a producer's declarations changed):"
        f" write it again with {REGENERATE}"
    )


def test_the_compiled_catalog_is_the_built_one() -> None:
    compiled = shipped._compiled_catalog()
    assert compiled is not None  # the fingerprint matches these files
    built = shipped.built_catalog()
    assert len(built.declared) > 300  # not empty
    assert list(compiled.declared.items()) == list(built.declared.items())  # order too
    for template in list(built.declared)[::7]:
        assert compiled.find(template) == built.find(template)


def test_the_declaring_files_are_the_producers_modules() -> None:
    names = {p.name for p in shipped.declaring_files()}
    assert {"catalog.py", "derive.py", "slurmgres.py", "gpu.py", "topology.py"} <= names
    assert {"readings.py", "common.py"} <= names


def test_a_changed_declaring_file_makes_the_catalog_be_built(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    edited = tmp_path / "gpu.py"
    files = shipped._declaring_paths()  # declaring_files, as text (what is fingerprinted)
    assert [Path(p) for p in files] == shipped.declaring_files()
    original = next(p for p in files if Path(p).name == "gpu.py")
    edited.write_bytes(Path(original).read_bytes() + b"\n# edited\n")
    monkeypatch.setattr(
        shipped, "_declaring_paths", lambda: [str(edited) if p == original else p for p in files]
    )
    assert shipped._compiled_catalog() is None


def test_diff_reads_the_compiled_catalog_without_importing_the_producers(
    tmp_path: Path,
) -> None:
    """`gpudiag diff`'s questions (volatile? a kernel reading?) are answered from the
    compiled catalog: no probe or importer module is loaded."""
    loaded = modules_loaded_by(
        "from gpudiag import shipped",
        "shipped.is_kernel_reading('gpu.0.kernel.stream.triad')",
        "shipped.is_volatile('gpu.0.temperature')",
    )
    producers = {m for m in loaded if m.startswith(("gpudiag.probes", "gpudiag.importing"))}
    assert producers == set(), producers
