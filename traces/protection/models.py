"""An environment's redaction rules, and the receipts of erasures by principal
(docs/data-protection.md). Registered with the traces app through traces.models."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class RedactionRule(models.Model):
    class Detector(models.TextChoices):
        CARD = "card", "Payment card number (Luhn)"
        IBAN = "iban", "IBAN (mod 97)"
        EMAIL = "email", "E-mail address"
        PHONE = "phone", "Phone number"
        NRIC = "nric", "Singapore NRIC/FIN"
        CUSTOM = "custom", "Custom pattern"

    class Action(models.TextChoices):
        REDACT = "redact", "Redact (keep a marker and the count)"
        REFUSE = "refuse", "Refuse the item"

    environment = models.ForeignKey(
        "strategies.Environment", on_delete=models.CASCADE, related_name="+"
    )
    key = models.SlugField(max_length=50, help_text="The marker's name: [redacted:<key>].")
    detector = models.CharField(max_length=10, choices=Detector.choices)
    pattern = models.TextField(blank=True, help_text="A custom rule's regular expression.")
    action = models.CharField(max_length=10, choices=Action.choices, default=Action.REDACT)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        app_label = "traces"
        ordering = ["environment", "key"]
        constraints = [
            models.UniqueConstraint(fields=["environment", "key"], name="redaction_rule_key")
        ]

    def __str__(self) -> str:
        return f"{self.key} ({self.detector}, {self.action})"


class Erasure(models.Model):
    """The receipt of one erasure by principal. Names the principal only by its digest, so
    the receipt itself does not keep what was erased."""

    principal_digest = models.CharField(max_length=64, help_text="SHA-256 of the principal.")
    reference = models.CharField(max_length=200, help_text="The data-protection request's id.")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    requested_by_name = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    counts = models.JSONField(default=dict, help_text="Table → rows removed.")
    removed = models.JSONField(default=dict, help_text="Table → ids removed.")

    class Meta:
        app_label = "traces"
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"erasure {self.pk} ({self.reference})"
