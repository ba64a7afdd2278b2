"""The audit and access logs streamed to a SIEM (issue 34 item 3): the destinations and each
one's cursor per chain (docs/siem.md)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("console", "0013_break_glass"),
    ]

    operations = [
        migrations.CreateModel(
            name="SiemDestination",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(max_length=100, unique=True)),
                (
                    "protocol",
                    models.CharField(
                        choices=[
                            ("syslog", "Syslog (RFC 5424 over TCP)"),
                            ("splunk_hec", "Splunk HTTP Event Collector"),
                            ("otlp_http", "OpenTelemetry logs (OTLP/HTTP JSON)"),
                        ],
                        max_length=20,
                    ),
                ),
                (
                    "url",
                    models.CharField(
                        help_text="syslog: tcp://host:port or tcp+tls://host:port; the others: an http(s) URL.",
                        max_length=500,
                    ),
                ),
                (
                    "ca_certificate",
                    models.TextField(
                        blank=True,
                        default="",
                        help_text="PEM: the CA a TLS syslog receiver's certificate is checked against.",
                    ),
                ),
                ("credential_encrypted", models.BinaryField(blank=True, null=True)),
                (
                    "status",
                    models.CharField(
                        choices=[("active", "streaming"), ("paused", "paused")],
                        default="active",
                        max_length=10,
                    ),
                ),
                ("paused_reason", models.TextField(blank=True, default="")),
                ("paused_at", models.DateTimeField(blank=True, null=True)),
                ("last_error", models.TextField(blank=True, default="")),
                ("last_error_at", models.DateTimeField(blank=True, null=True)),
                ("last_success_at", models.DateTimeField(blank=True, null=True)),
                (
                    "failures",
                    models.PositiveIntegerField(default=0, help_text="Tries failed in a row."),
                ),
                ("created_by", models.CharField(blank=True, default="", max_length=200)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
            ],
            options={
                "ordering": ["name"],
            },
        ),
        migrations.CreateModel(
            name="SiemCursor",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "chain",
                    models.CharField(
                        choices=[("audit", "audit log"), ("access", "access log")], max_length=10
                    ),
                ),
                ("last_id", models.BigIntegerField(default=0)),
                ("last_checkpoint_id", models.BigIntegerField(default=0)),
                (
                    "sent",
                    models.BigIntegerField(
                        default=0, help_text="Events accepted by the sink so far."
                    ),
                ),
                ("updated_at", models.DateTimeField(auto_now=True)),
                (
                    "destination",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="cursors",
                        to="console.siemdestination",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("destination", "chain"), name="siem_cursor_one_per_chain"
                    )
                ],
            },
        ),
    ]
