"""The delivery contract (issue 31): what a job sends (``Job.request``, copied from
``Schedule.request`` to occurrences), the response it asked to keep (``Job.response``)
and the team's retry and failure-callback defaults.

Safe with pollers running: nullable columns without defaults are catalog-only on
PostgreSQL (NULL: the default webhook, as every job sent before), the team's columns
are on a small table, and ``lock_timeout`` bounds each lock wait as in 0013. Pollers of
the previous release do not read ``request``: run them down before jobs that use it
are written (docs/delivery.md).
"""

from django.db import migrations, models

LOCK_TIMEOUT_SQL = "SET LOCAL lock_timeout = '5s'"


def bound_lock_waits(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(LOCK_TIMEOUT_SQL)


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0014_schedule_ledger_floor"),
    ]

    operations = [
        migrations.RunPython(bound_lock_waits, bound_lock_waits),
        migrations.AddField(
            model_name="job",
            name="request",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="job",
            name="response",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="schedule",
            name="request",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="team",
            name="default_on_failure_url",
            field=models.CharField(blank=True, max_length=2048),
        ),
        migrations.AddField(
            model_name="team",
            name="retry_max_attempts",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="team",
            name="retry_max_backoff_seconds",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="team",
            name="retry_min_backoff_seconds",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
    ]
