"""The suite itself under load: pytest-timeout's per-test limit counts from a test's body
when the test uses a shared fixture (tests/conftest.py, _shared_fixtures_untimed), so a
fixture built once per run, slowly on a loaded machine, does not error its first test."""

from __future__ import annotations

import time

import pytest

# longer than the limit of the test below; the fixture is built in its setup
FIXTURE_SECONDS = 0.6


@pytest.fixture(scope="module")
def slow_shared() -> float:
    """A shared fixture that takes longer than the test's limit to build."""
    time.sleep(FIXTURE_SECONDS)
    return FIXTURE_SECONDS


@pytest.mark.timeout(FIXTURE_SECONDS / 2)
def test_a_shared_fixture_is_outside_the_per_test_limit(slow_shared, request) -> None:
    mark = request.node.get_closest_marker("timeout")
    assert mark.kwargs.get("func_only") is True and mark.args == (FIXTURE_SECONDS / 2,)
    assert slow_shared == FIXTURE_SECONDS
