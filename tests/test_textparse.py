"""The shared sysfs/procfs text parsers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpudiag.textparse import (
    format_cpulist,
    parse_bool01,
    parse_bracketed,
    parse_cpulist,
    parse_cpumask,
    parse_key_counts,
    parse_meminfo,
)


def test_cpulist() -> None:
    assert parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpulist("\n") == []
    assert parse_cpulist("0-15:4") == [0, 4, 8, 12]
    assert format_cpulist([0, 1, 2, 3, 8, 10, 11]) == "0-3,8,10-11"
    assert format_cpulist([]) == ""


@given(st.sets(st.integers(min_value=0, max_value=600)))
def test_cpulist_round_trip(cpus: set[int]) -> None:
    assert parse_cpulist(format_cpulist(sorted(cpus))) == sorted(cpus)


def test_cpumask() -> None:
    assert parse_cpumask("0000ffff") == list(range(16))
    # hwloc's POWER9 capture: CPUs 88-103 of 176
    mask = "0000,00000000,000000ff,ff000000,00000000,00000000"
    assert parse_cpumask(mask) == list(range(88, 104))


def test_meminfo() -> None:
    text = "MemTotal:       2113929216 kB\nHugePages_Total:       0\nNode 1 MemFree: 5 kB\n"
    assert parse_meminfo(text) == {"MemTotal": 2113929216, "HugePages_Total": 0, "MemFree": 5}


def test_bracketed() -> None:
    assert parse_bracketed("always [madvise] never\n") == "madvise"
    with pytest.raises(ValueError):
        parse_bracketed("always madvise never")


def test_bool01_and_key_counts() -> None:
    assert parse_bool01("1\n") is True and parse_bool01("0") is False
    with pytest.raises(ValueError):
        parse_bool01("2")
    assert parse_key_counts("RxErr 0\nTOTAL_ERR_COR 12\n") == {"RxErr": 0, "TOTAL_ERR_COR": 12}
