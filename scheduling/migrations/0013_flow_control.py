"""Flow control (``scheduling.flow``): a key on jobs and schedules, the key limits and slots.

Safe with pollers running: nullable columns without defaults are catalog-only on
PostgreSQL; the partial index covers only rows with a key (none yet), and
``lock_timeout`` bounds each lock wait as in 0012.
"""

import django.db.models.deletion
from django.db import migrations, models

LOCK_TIMEOUT_SQL = "SET LOCAL lock_timeout = '5s'"


def bound_lock_waits(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(LOCK_TIMEOUT_SQL)



class Migration(migrations.Migration):

    dependencies = [
        ('scheduling', '0012_one_write_per_job'),
    ]

    operations = [
        migrations.RunPython(bound_lock_waits, bound_lock_waits),
        migrations.CreateModel(
            name='FlowControl',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('key', models.CharField(max_length=100)),
                ('rate', models.PositiveIntegerField(blank=True, null=True)),
                ('period_seconds', models.PositiveIntegerField(default=1)),
                ('parallelism', models.PositiveIntegerField(blank=True, null=True)),
                ('paused', models.BooleanField(default=False)),
                ('tat', models.DateTimeField(blank=True, null=True)),
                ('window_start', models.DateTimeField(blank=True, null=True)),
                ('window_count', models.PositiveIntegerField(default=0)),
                ('created_at', models.DateTimeField()),
                ('updated_at', models.DateTimeField()),
            ],
        ),
        migrations.CreateModel(
            name='FlowSlot',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('poller', models.CharField(max_length=200)),
                ('slots', models.IntegerField(default=0)),
                ('expires_at', models.DateTimeField()),
            ],
        ),
        migrations.AddField(
            model_name='job',
            name='flow_control_key',
            field=models.CharField(blank=True, max_length=100, null=True),
        ),
        migrations.AddField(
            model_name='schedule',
            name='flow_control_key',
            field=models.CharField(blank=True, max_length=100, null=True),
        ),
        migrations.AddIndex(
            model_name='job',
            index=models.Index(condition=models.Q(('flow_control_key__isnull', False), ('status', 'pending')), fields=['team', 'flow_control_key', 'due_at'], name='job_pending_flow_key'),
        ),
        migrations.AddField(
            model_name='flowcontrol',
            name='team',
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='flows', to='scheduling.team'),
        ),
        migrations.AddField(
            model_name='flowslot',
            name='flow',
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='slots', to='scheduling.flowcontrol'),
        ),
        migrations.AddConstraint(
            model_name='flowcontrol',
            constraint=models.UniqueConstraint(fields=('team', 'key'), name='flowcontrol_team_key_uniq'),
        ),
        migrations.AddConstraint(
            model_name='flowslot',
            constraint=models.UniqueConstraint(fields=('flow', 'poller'), name='flowslot_flow_poller_uniq'),
        ),
    ]
