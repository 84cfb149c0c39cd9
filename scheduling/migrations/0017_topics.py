"""Topics (issue 32): a team's named topics and their endpoints; a job may name a topic
(``target_kind`` topic) and ends ``fanned_out`` once its children are written.

Safe with pollers and the API running: the new choices are no SQL (Django keeps
choices in Python), and the two new tables are created empty. The previous release
neither writes nor reads them.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('scheduling', '0016_trace_context'),
    ]

    operations = [
        migrations.AlterField(
            model_name='job',
            name='status',
            field=models.CharField(choices=[('pending', 'Pending'), ('delivered', 'Delivered'), ('dead', 'Dead'), ('canceled', 'Canceled'), ('expired', 'Expired'), ('fanned_out', 'Fanned Out')], default='pending', max_length=16),
        ),
        migrations.AlterField(
            model_name='job',
            name='target_kind',
            field=models.CharField(choices=[('webhook', 'Webhook'), ('handler', 'Handler'), ('topic', 'Topic')], max_length=16),
        ),
        migrations.AlterField(
            model_name='schedule',
            name='target_kind',
            field=models.CharField(choices=[('webhook', 'Webhook'), ('handler', 'Handler'), ('topic', 'Topic')], max_length=16),
        ),
        migrations.CreateModel(
            name='Topic',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(max_length=40)),
                ('created_at', models.DateTimeField()),
                ('updated_at', models.DateTimeField()),
                ('team', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='topics', to='scheduling.team')),
            ],
            options={
                'ordering': ['team', 'name'],
            },
        ),
        migrations.CreateModel(
            name='TopicEndpoint',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(max_length=40)),
                ('url', models.CharField(max_length=2048)),
                ('request', models.JSONField(blank=True, null=True)),
                ('flow_control_key', models.CharField(blank=True, max_length=100, null=True)),
                ('state', models.CharField(choices=[('enabled', 'Enabled'), ('disabled', 'Disabled')], default='enabled', max_length=16)),
                ('disabled_reason', models.CharField(blank=True, max_length=500)),
                ('disabled_at', models.DateTimeField(blank=True, null=True)),
                ('failing_since', models.DateTimeField(blank=True, null=True)),
                ('created_at', models.DateTimeField()),
                ('updated_at', models.DateTimeField()),
                ('topic', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='endpoints', to='scheduling.topic')),
            ],
            options={
                'ordering': ['topic', 'name'],
            },
        ),
        migrations.AddConstraint(
            model_name='topic',
            constraint=models.UniqueConstraint(fields=('team', 'name'), name='topic_team_name_uniq'),
        ),
        migrations.AddConstraint(
            model_name='topicendpoint',
            constraint=models.UniqueConstraint(fields=('topic', 'name'), name='topicendpoint_topic_name_uniq'),
        ),
    ]
