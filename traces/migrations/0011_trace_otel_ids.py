# The trace's OpenTelemetry ids (issue 32.4): two nullable columns, added to the partitioned
# table and every day partition at once (metadata only, no rewrite).

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("traces", "0010_candidate_decision_not_requested"),
    ]

    operations = [
        migrations.AddField(
            model_name="trace",
            name="otel_span_id",
            field=models.CharField(blank=True, max_length=16, null=True),
        ),
        migrations.AddField(
            model_name="trace",
            name="otel_trace_id",
            field=models.CharField(blank=True, max_length=32, null=True),
        ),
    ]
