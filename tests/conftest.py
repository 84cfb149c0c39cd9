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


@pytest.fixture(autouse=True)
def _schedule_seeded_after_flush(request):  # type: ignore[no-untyped-def]
    # A transactional test ends by flushing every table, the shard-count schedule
    # row seeded by migration 0002 included; the next such test needs it back.
    marker = request.node.get_closest_marker("django_db")
    if marker is not None and marker.kwargs.get("transaction"):
        request.getfixturevalue("transactional_db")
        from datetime import UTC, datetime

        from django.conf import settings

        from scheduling.models import ShardCountSchedule

        if not ShardCountSchedule.objects.exists():
            ShardCountSchedule.objects.create(
                effective_from=datetime(2000, 1, 1, tzinfo=UTC),
                shard_count=settings.SENDLATER_DEFAULT_SHARDS,
                reason="re-seeded after a transactional test's flush",
            )
