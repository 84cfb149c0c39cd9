from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True
    dependencies = []

    operations = [
        migrations.CreateModel(
            name="ProcessedWebhook",
            fields=[
                ("webhook_id", models.CharField(max_length=255, primary_key=True, serialize=False)),
                ("processed_at", models.DateTimeField(auto_now_add=True)),
            ],
        ),
    ]
