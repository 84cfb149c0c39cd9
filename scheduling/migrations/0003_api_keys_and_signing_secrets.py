"""API keys (hashed) and each team's webhook signing secret.

Also, on PostgreSQL only, a GIN index on job metadata: bulk cancel and the list
filter match ``metadata @> {...}`` (a team cancels every reminder of a booking).
And the database cache table that holds the API's throttle counters, so that
``migrate`` alone readies a deployment (createcachetable is idempotent, and does
nothing when CACHE_URL names a non-database cache).
"""

import django.db.models.deletion
import scheduling.models
from django.core.management import call_command
from django.db import migrations, models


def distinct_secrets(apps, schema_editor):
    # AddField evaluates a callable default once: give every existing team its own.
    team_model = apps.get_model("scheduling", "Team")
    db = schema_editor.connection.alias
    for team in team_model.objects.using(db).only("pk"):
        team_model.objects.using(db).filter(pk=team.pk).update(
            signing_secret=scheduling.models.signing_secret_generate()
        )


METADATA_INDEX = "job_metadata_gin"


def metadata_index_create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {METADATA_INDEX} "
            "ON scheduling_job USING gin (metadata jsonb_path_ops)"
        )


def metadata_index_drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX IF EXISTS {METADATA_INDEX}")


def cache_table_create(apps, schema_editor):
    call_command("createcachetable", database=schema_editor.connection.alias, verbosity=0)


class Migration(migrations.Migration):

    dependencies = [
        ('scheduling', '0002_seed_shard_count_schedule'),
    ]

    operations = [
        migrations.AddField(
            model_name='team',
            name='previous_signing_secret',
            field=models.CharField(blank=True, max_length=100),
        ),
        migrations.AddField(
            model_name='team',
            name='previous_signing_secret_expires_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='team',
            name='signing_secret',
            field=models.CharField(default=scheduling.models.signing_secret_generate, max_length=100),
        ),
        migrations.CreateModel(
            name='ApiKey',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(blank=True, max_length=200)),
                ('prefix', models.CharField(editable=False, max_length=16, unique=True)),
                ('key_hash', models.CharField(editable=False, max_length=64)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('revoked_at', models.DateTimeField(blank=True, null=True)),
                ('team', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='api_keys', to='scheduling.team')),
            ],
            options={
                'verbose_name': 'API key',
                'ordering': ['team', '-created_at'],
            },
        ),
        migrations.RunPython(distinct_secrets, migrations.RunPython.noop),
        migrations.RunPython(metadata_index_create, metadata_index_drop),
        migrations.RunPython(cache_table_create, migrations.RunPython.noop),
    ]
