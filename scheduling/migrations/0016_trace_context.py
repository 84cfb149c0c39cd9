"""The W3C trace context a job and a schedule keep (``Job.trace_context``,
``Schedule.trace_context``; docs/operations.md, "Traces").

Safe with pollers and the API running: a nullable column without a default is
catalog-only on PostgreSQL (on the partitioned jobs table too: the parent and every
partition, no rewrite), and ``lock_timeout`` bounds the lock wait as in 0013. The
previous release neither writes nor reads the columns.
"""

from django.db import migrations, models

LOCK_TIMEOUT_SQL = "SET LOCAL lock_timeout = '5s'"


def bound_lock_waits(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(LOCK_TIMEOUT_SQL)


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0015_delivery_contract"),
    ]

    operations = [
        migrations.RunPython(bound_lock_waits, bound_lock_waits),
        migrations.AddField(
            model_name="job",
            name="trace_context",
            field=models.TextField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="schedule",
            name="trace_context",
            field=models.TextField(blank=True, null=True),
        ),
    ]
