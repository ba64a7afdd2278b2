"""The console app's models. Each lives in the models module of the job that owns it
(kernel: roles, grants, the audit and access logs; accounts: personal tokens);
Django looks for an app's models here, so this module gathers them and keeps the shell's own
worker heartbeat."""

from __future__ import annotations

from django.db import models

from console.accounts.models import (
    BreakGlassAccount,
    ExternalIdentity,
    PersonalToken,
    PersonalTokenQuerySet,
    RecoveryCode,
    RecoveryCodeDevice,
    SamlAssertion,
    ScimGroup,
    ScimToken,
    ScimUser,
)
from console.kernel.models import (
    AccessLogEntry,
    AuditRecord,
    ChainCheckpoint,
    ChainedRecord,
    Grant,
    GrantQuerySet,
    GroupMapping,
    Role,
    SiemCursor,
    SiemDestination,
)

__all__ = [
    "AccessLogEntry",
    "AuditRecord",
    "BreakGlassAccount",
    "ChainCheckpoint",
    "ChainedRecord",
    "ExternalIdentity",
    "Grant",
    "GrantQuerySet",
    "GroupMapping",
    "PersonalToken",
    "PersonalTokenQuerySet",
    "RecoveryCode",
    "RecoveryCodeDevice",
    "Role",
    "SamlAssertion",
    "SiemCursor",
    "SiemDestination",
    "ScimGroup",
    "ScimToken",
    "ScimUser",
    "WorkerHeartbeat",
]


class WorkerHeartbeat(models.Model):
    """Written by the `console.heartbeat` task: the dashboard and tests see workers are alive."""

    marker = models.CharField(max_length=100, unique=True)
    seen_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.marker} @ {self.seen_at:%H:%M:%S}"
