"""Idempotency keys in their own table; on PostgreSQL, the jobs table partitioned by bucket.

PostgreSQL only (Django's model state is unchanged): ``scheduling_job`` is rebuilt
as ``PARTITION BY RANGE (bucket)`` with primary key ``(id, bucket)``, its indexes
and foreign key recreated under the same names, a DEFAULT partition, and every
existing row copied (into the DEFAULT partition: ``manage.py partitions --ensure``,
which the pollers also run, then moves them into dated partitions). Unique keys on
a partitioned table must include the partition key, hence the idempotency table;
foreign keys to it must reference such a key, hence ``db_constraint=False`` on
the delivery attempts and task runs. The reverse rebuilds a plain table.
"""

from __future__ import annotations

import django.db.models.deletion
from django.db import migrations, models

SAVED_INDEXES_SQL = """
SELECT indexdef FROM pg_indexes
WHERE schemaname = current_schema() AND tablename = 'scheduling_job'
  AND indexname NOT IN (SELECT conname FROM pg_constraint
                        WHERE conrelid = 'scheduling_job'::regclass AND contype IN ('p', 'u'))
"""
SAVED_FKS_SQL = """
SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint
WHERE conrelid = 'scheduling_job'::regclass AND contype = 'f'
"""


def _rebuild(schema_editor, *, partitioned: bool) -> None:
    """Rebuild scheduling_job (partitioned or plain), keeping rows, index and FK names."""
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(SAVED_INDEXES_SQL)
        indexes = [row[0] for row in cursor.fetchall()]
        cursor.execute(SAVED_FKS_SQL)
        fks = cursor.fetchall()
        shape = "PARTITION BY RANGE (bucket)" if partitioned else ""
        key = "id, bucket" if partitioned else "id"
        cursor.execute(
            "CREATE TABLE scheduling_job_rebuilt"
            f" (LIKE scheduling_job INCLUDING DEFAULTS INCLUDING CONSTRAINTS) {shape}"
        )
        cursor.execute(
            f"ALTER TABLE scheduling_job_rebuilt ADD CONSTRAINT scheduling_job_rebuilt_pkey"
            f" PRIMARY KEY ({key})"
        )
        if partitioned:
            cursor.execute(
                "CREATE TABLE scheduling_job_default PARTITION OF scheduling_job_rebuilt DEFAULT"
            )
        cursor.execute("INSERT INTO scheduling_job_rebuilt SELECT * FROM scheduling_job")
        cursor.execute("DROP TABLE scheduling_job")
        cursor.execute("ALTER TABLE scheduling_job_rebuilt RENAME TO scheduling_job")
        cursor.execute(
            "ALTER TABLE scheduling_job"
            " RENAME CONSTRAINT scheduling_job_rebuilt_pkey TO scheduling_job_pkey"
        )
        for name, definition in fks:
            cursor.execute(f'ALTER TABLE scheduling_job ADD CONSTRAINT "{name}" {definition}')
        for definition in indexes:
            # pg_indexes gives "ON ONLY" for a partitioned parent's index; the plain
            # form creates the index on every partition as well.
            cursor.execute(definition.replace(" ON ONLY ", " ON "))


def partition_jobs(apps, schema_editor) -> None:
    _rebuild(schema_editor, partitioned=True)


def unpartition_jobs(apps, schema_editor) -> None:
    _rebuild(schema_editor, partitioned=False)


def copy_idempotency_keys(apps, schema_editor) -> None:
    job_model = apps.get_model("scheduling", "Job")
    key_model = apps.get_model("scheduling", "IdempotencyKey")
    rows = job_model.objects.filter(idempotency_key__isnull=False).values_list(
        "team_id", "idempotency_key", "id", "request_fingerprint", "created_at"
    )
    key_model.objects.bulk_create(
        (
            key_model(team_id=t, key=k, job_id=i, fingerprint=f, created_at=c)
            for t, k, i, f, c in rows.iterator()
        ),
        batch_size=1000,
    )


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0004_delivery_attempts_task_runs"),
    ]

    operations = [
        migrations.CreateModel(
            name="IdempotencyKey",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("key", models.CharField(max_length=255)),
                ("job_id", models.UUIDField()),
                ("fingerprint", models.CharField(max_length=64)),
                ("created_at", models.DateTimeField()),
                (
                    "team",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="idempotency_keys",
                        to="scheduling.team",
                    ),
                ),
            ],
            options={
                "indexes": [models.Index(fields=["job_id"], name="idempotencykey_job")],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("team", "key"), name="idempotencykey_team_key_uniq"
                    )
                ],
            },
        ),
        migrations.RunPython(copy_idempotency_keys, migrations.RunPython.noop),
        migrations.RemoveConstraint(
            model_name="job",
            name="job_team_idempotency_key_uniq",
        ),
        migrations.AlterField(
            model_name="deliveryattempt",
            name="job",
            field=models.ForeignKey(
                db_constraint=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="delivery_attempts",
                to="scheduling.job",
            ),
        ),
        migrations.AlterField(
            model_name="taskrun",
            name="job",
            field=models.OneToOneField(
                db_constraint=False,
                on_delete=django.db.models.deletion.CASCADE,
                primary_key=True,
                related_name="task_run",
                serialize=False,
                to="scheduling.job",
            ),
        ),
        migrations.AlterField(
            model_name="job",
            name="team",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="jobs",
                to="scheduling.team",
            ),
        ),
        migrations.RunPython(partition_jobs, unpartition_jobs),
    ]
