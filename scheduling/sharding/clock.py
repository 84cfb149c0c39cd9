"""The service's notion of now: the database clock, and the open bucket."""

from __future__ import annotations

from datetime import UTC, datetime

from django.db import connection
from django.utils import timezone

from scheduling import conf, keys


def db_now() -> datetime:
    """Return the database server's current time (UTC).

    Every process asks the same clock, so skew between machines neither fires
    jobs early nor skips buckets. SQLite has no server, so the local clock is it.
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT statement_timestamp()")
            return cursor.fetchone()[0].astimezone(UTC)
    return timezone.now()


def iso_utc(value: datetime) -> str:
    """``value`` as the API and webhooks write times: ISO 8601 in UTC with ``Z``."""
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def open_bucket(now: datetime) -> datetime:
    """Return the bucket that holds ``now``: the one still taking writes."""
    return keys.bucket_of(now, conf.bucket_seconds())


def is_closed(bucket: datetime, now: datetime) -> bool:
    """A bucket closes once ``now >= bucket_end + close_grace``."""
    return now >= keys.bucket_end(bucket, conf.bucket_seconds()) + conf.close_grace()
