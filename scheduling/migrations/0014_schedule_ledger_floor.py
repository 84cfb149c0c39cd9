"""The schedule ledger's floor (``Schedule.ledger_floor``): no plan writes an instant
before it, so the ledger rows before it can be pruned (docs/schedules.md).

Safe with pollers running: a nullable column without a default is catalog-only on
PostgreSQL (NULL: nothing pruned yet), and ``lock_timeout`` bounds the lock wait as
in 0013. A planner of the previous release ignores the column (it neither checks nor
moves the floor), and nothing is pruned until the floor is set by this release's.
"""

from django.db import migrations, models

LOCK_TIMEOUT_SQL = "SET LOCAL lock_timeout = '5s'"


def bound_lock_waits(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(LOCK_TIMEOUT_SQL)


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0013_flow_control"),
    ]

    operations = [
        migrations.RunPython(bound_lock_waits, bound_lock_waits),
        migrations.AddField(
            model_name="schedule",
            name="ledger_floor",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
