"""Shared fixtures: teams, a controllable clock, and the bucket-count cache reset."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from scheduling.buckets import forget_cached_counts


@pytest.fixture(autouse=True)
def _fresh_bucket_cache() -> Iterator[None]:
    # Recorded counts are cached per process; a test's rollback un-records them.
    forget_cached_counts()
    yield
    forget_cached_counts()


@pytest.fixture
def team(db):  # type: ignore[no-untyped-def]
    from tests.support.factories import team_create

    return team_create(slug="acme")


@pytest.fixture
def other_team(db):  # type: ignore[no-untyped-def]
    from tests.support.factories import team_create

    return team_create(slug="globex")


@pytest.fixture
def api(team):  # type: ignore[no-untyped-def]
    """An API client authenticated as ``team``."""
    from tests.support.api import client_for

    return client_for(team)


@pytest.fixture
def other_api(other_team):  # type: ignore[no-untyped-def]
    from tests.support.api import client_for

    return client_for(other_team)
