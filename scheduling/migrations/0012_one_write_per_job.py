"""The lease is the lock: no per-row claim (docs/pollers.md, "In flight").

Jobs in flight are recorded per batch (``InFlightBatch``) instead of as ``claimed``
rows; each job keeps its last attempt inline. Safe with pollers running:

- every step is catalog-only on PostgreSQL (nullable columns without defaults or
  checks, an index and columns dropped) except returning the claimed rows, which
  reads the small partial index of claimed rows;
- ``lock_timeout`` bounds the wait for each ACCESS EXCLUSIVE lock, so the migration
  never queues the pollers behind a long query: it fails instead and can be rerun;
- rows that pollers of the previous version had claimed go back to pending (their
  write-back is refused, as after a lost lease; duplicates stay within their
  windows). Pollers of the previous version fail on the dropped columns and back
  off: deploy the new code, then migrate.
"""

from django.db import migrations, models

LOCK_TIMEOUT_SQL = "SET LOCAL lock_timeout = '5s'"


def bound_lock_waits(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(LOCK_TIMEOUT_SQL)


def return_claimed(apps, schema_editor):
    schema_editor.execute(
        "UPDATE scheduling_job SET status = 'pending', claim_owner = NULL, claim_epoch = NULL,"
        " claimed_at = NULL WHERE status = 'claimed'"
    )


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0011_throttlecounter"),
    ]

    operations = [
        migrations.RunPython(bound_lock_waits, bound_lock_waits),
        migrations.RunPython(return_claimed, migrations.RunPython.noop),
        migrations.CreateModel(
            name="InFlightBatch",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("shard", models.PositiveIntegerField()),
                ("epoch", models.BigIntegerField()),
                ("owner", models.CharField(max_length=200)),
                ("job_ids", models.TextField()),
                ("job_count", models.PositiveIntegerField()),
                ("created_at", models.DateTimeField()),
            ],
        ),
        migrations.RemoveIndex(
            model_name="job",
            name="job_claimed_shard_bucket",
        ),
        migrations.AddField(
            model_name="job",
            name="last_attempt_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="job",
            name="last_attempt_ms",
            field=models.IntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="job",
            name="last_status_code",
            field=models.SmallIntegerField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="job",
            name="status",
            field=models.CharField(
                choices=[
                    ("pending", "Pending"),
                    ("delivered", "Delivered"),
                    ("dead", "Dead"),
                    ("canceled", "Canceled"),
                    ("expired", "Expired"),
                ],
                default="pending",
                max_length=16,
            ),
        ),
        migrations.AddIndex(
            model_name="inflightbatch",
            index=models.Index(fields=["shard", "epoch"], name="inflightbatch_shard_epoch"),
        ),
        migrations.RemoveField(
            model_name="job",
            name="claim_epoch",
        ),
        migrations.RemoveField(
            model_name="job",
            name="claim_owner",
        ),
        migrations.RemoveField(
            model_name="job",
            name="claimed_at",
        ),
    ]
