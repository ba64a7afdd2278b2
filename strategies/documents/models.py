"""Documents and their versions.

A document (a task strategy or the agent's context profile) has numbered versions. At most
one version per document is an editable draft; freezing makes it immutable, and a database
trigger refuses any UPDATE or DELETE of a frozen version.

`Guard` (the database triggers that refuse a change, declared in a model's `Meta.triggers`)
lives here too: it guards this module's versions and, imported from here, the audit, access
and release logs.
"""

from __future__ import annotations

import pgtrigger
from django.conf import settings
from django.db import models
from django.db.models import Q

from console.kernel.guards import Guard
from strategies.catalog.models import Agent


class Document(models.Model):
    class Kind(models.TextChoices):
        STRATEGY = "strategy", "Strategy"
        PROFILE = "profile", "Context profile"

    PROFILE_KEY = "profile"

    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="documents")
    kind = models.CharField(max_length=20, choices=Kind.choices)
    key = models.SlugField(
        max_length=100, help_text="Task key for a strategy; 'profile' for the profile."
    )
    name = models.CharField(max_length=200, blank=True)
    description = models.TextField(blank=True)
    # The highest version number ever given here, discarded drafts included: a number names
    # one content for ever (the audit says "v4"), so it is never given twice.
    last_version_number = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["agent", "kind", "key"]
        constraints = [
            models.UniqueConstraint(fields=["agent", "key"], name="document_unique_key_per_agent"),
            models.CheckConstraint(
                condition=Q(kind="strategy") | Q(key="profile"), name="document_profile_key"
            ),
        ]
        triggers = [
            Guard(
                name="version_numbers_never_go_back",
                operation=pgtrigger.Update,
                condition=pgtrigger.Q(
                    new__last_version_number__lt=pgtrigger.F("old__last_version_number")
                ),
                func=(
                    "RAISE EXCEPTION 'document %: version numbers are never given twice', "
                    "OLD.id USING ERRCODE = 'integrity_constraint_violation';"
                ),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.agent.key}/{self.key}"


class Version(models.Model):
    class State(models.TextChoices):
        DRAFT = "draft", "Draft"
        FROZEN = "frozen", "Frozen"

    document = models.ForeignKey(Document, on_delete=models.PROTECT, related_name="versions")
    number = models.PositiveIntegerField()
    state = models.CharField(max_length=10, choices=State.choices, default=State.DRAFT)
    body = models.JSONField()
    content_hash = models.CharField(max_length=64)
    revision = models.PositiveIntegerField(
        default=1, help_text="Draft edit counter for optimistic concurrency."
    )
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="children"
    )
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    author_label = models.CharField(max_length=200, blank=True)
    note = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    frozen_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["document", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["document", "number"], name="version_unique_number"),
            models.UniqueConstraint(
                fields=["document"], condition=Q(state="draft"), name="version_one_open_draft"
            ),
            models.CheckConstraint(
                condition=Q(state="draft", frozen_at__isnull=True)
                | Q(state="frozen", frozen_at__isnull=False),
                name="version_frozen_at_matches_state",
            ),
        ]
        indexes = [models.Index(fields=["document", "state"])]
        triggers = [
            Guard(
                name="frozen_version_immutable",
                operation=pgtrigger.Update | pgtrigger.Delete,
                condition=pgtrigger.Q(old__state="frozen"),
                func=(
                    "RAISE EXCEPTION 'version % of document % is frozen and cannot be changed',"
                    " OLD.number, OLD.document_id USING ERRCODE = 'integrity_constraint_violation';"
                ),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.document} v{self.number} ({self.state})"

    @property
    def is_draft(self) -> bool:
        return self.state == self.State.DRAFT
