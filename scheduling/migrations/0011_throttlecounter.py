from django.db import migrations, models


def unlogged(apps, schema_editor):
    # Counters need no crash safety (a lost increment only lends a little budget), and
    # an unlogged table writes no WAL: counting a request costs no commit flush.
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE scheduling_throttlecounter SET UNLOGGED")


class Migration(migrations.Migration):
    dependencies = [("scheduling", "0010_schedules")]

    operations = [
        migrations.CreateModel(
            name="ThrottleCounter",
            fields=[
                ("key", models.CharField(max_length=200, primary_key=True, serialize=False)),
                ("window_end", models.BigIntegerField()),
                ("count", models.IntegerField()),
            ],
            options={"verbose_name": "throttle counter"},
        ),
        migrations.RunPython(unlogged, migrations.RunPython.noop),
    ]
