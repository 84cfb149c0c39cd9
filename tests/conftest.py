"""Shared fixtures: teams, a controllable clock, and the bucket-count cache reset."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from scheduling.sharding.buckets import forget_cached_counts


@pytest.fixture(autouse=True)
def _fresh_bucket_cache() -> Iterator[None]:
    # Recorded counts are cached per process; a test's rollback un-records them.
    forget_cached_counts()
    yield
    forget_cached_counts()


@pytest.fixture(autouse=True)
def _fresh_api_key_cache() -> Iterator[None]:
    # Verified keys are cached per process; a test's rollback may remove or revoke them.
    from scheduling.teams import api_key_cache_clear

    api_key_cache_clear()
    yield
    api_key_cache_clear()


@pytest.fixture(autouse=True)
def _fresh_endpoint_clears() -> Iterator[None]:
    # Endpoints cleared lately are remembered per process; a test's rollback undoes it.
    from polling.writing.endpoint_health import cleared_forget

    cleared_forget()
    yield
    cleared_forget()


@pytest.fixture(autouse=True)
def _fresh_db_time() -> Iterator[None]:
    # A poller anchors the process-wide database clock, maybe to a test's made-up time.
    from polling.common.database_time import DB_TIME

    DB_TIME.reset()
    yield
    DB_TIME.reset()


@pytest.fixture(autouse=True)
def _shard_schedule_seeded(request: pytest.FixtureRequest) -> None:
    """Give transactional tests the schedule row that migration 0002 seeds.

    Each transactional test ends with a flush, which empties every table, the
    seeded schedule included; the next transactional test would find no count.
    """
    marker = request.node.get_closest_marker("django_db")
    if marker is None or not (marker.kwargs.get("transaction") or marker.args[:1] == (True,)):
        return
    request.getfixturevalue("transactional_db")
    from django.conf import settings

    from scheduling import keys
    from scheduling.models import ShardCountSchedule
    from scheduling.sharding.clock import db_now

    if not ShardCountSchedule.objects.exists():
        ShardCountSchedule.objects.create(
            effective_from=keys.bucket_of(db_now(), settings.SENDLATER_BUCKET_SECONDS),
            shard_count=settings.SENDLATER_DEFAULT_SHARDS,
            reason="test seed after a flush",
        )


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
