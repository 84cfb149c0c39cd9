"""Seed the shard-count schedule with SENDLATER_DEFAULT_SHARDS from migration time on.

The earliest schedule row also covers any bucket before it (scheduling.buckets).
"""

from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import migrations


def seed(apps, schema_editor):
    schedule = apps.get_model("scheduling", "ShardCountSchedule")
    if schedule.objects.using(schema_editor.connection.alias).exists():
        return
    width = settings.SENDLATER_BUCKET_SECONDS
    now = datetime.now(UTC)
    micros = (now - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    start = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(
        microseconds=micros - micros % (width * 1_000_000)
    )
    schedule.objects.using(schema_editor.connection.alias).create(
        effective_from=start,
        shard_count=settings.SENDLATER_DEFAULT_SHARDS,
        reason="initial shard count (SENDLATER_DEFAULT_SHARDS)",
    )


def unseed(apps, schema_editor):
    apps.get_model("scheduling", "ShardCountSchedule").objects.using(
        schema_editor.connection.alias
    ).filter(reason="initial shard count (SENDLATER_DEFAULT_SHARDS)").delete()


class Migration(migrations.Migration):
    dependencies = [("scheduling", "0001_initial")]

    operations = [migrations.RunPython(seed, unseed)]
