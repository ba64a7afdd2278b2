"""The strategies app's models. Each lives in the models module of the job that owns it;
Django looks for an app's models here, so this module only gathers them."""

from strategies.catalog.models import Agent, Environment, Manifest
from strategies.delivery.models import ConfigPayload, Webhook, WebhookAttempt, WebhookDelivery
from strategies.documents.models import Document, Version
from strategies.releases.models import (
    ApprovalRequest,
    ChangeHours,
    FreezeBreakGlass,
    FreezeWindow,
    Release,
    ReleaseEvent,
    Rollout,
    ScheduledGoLive,
    ShadowRelease,
)
from strategies.runtime.models import RuntimeToken

__all__ = [
    "Agent",
    "ApprovalRequest",
    "ChangeHours",
    "ConfigPayload",
    "Document",
    "Environment",
    "FreezeBreakGlass",
    "FreezeWindow",
    "Manifest",
    "Release",
    "ReleaseEvent",
    "Rollout",
    "RuntimeToken",
    "ScheduledGoLive",
    "ShadowRelease",
    "Version",
    "Webhook",
    "WebhookAttempt",
    "WebhookDelivery",
]
