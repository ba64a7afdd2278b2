"""The strategies app's models. Each lives in the models module of the job that owns it;
Django looks for an app's models here, so this module only gathers them."""

from strategies.catalog.models import Agent, Environment, Manifest
from strategies.delivery.models import ConfigPayload, Webhook, WebhookAttempt, WebhookDelivery
from strategies.documents.models import Document, Version
from strategies.releases.models import (
    ApprovalRequest,
    Release,
    ReleaseEvent,
    Rollout,
    ShadowRelease,
)
from strategies.runtime.models import RuntimeToken

__all__ = [
    "Agent",
    "ApprovalRequest",
    "ConfigPayload",
    "Document",
    "Environment",
    "Manifest",
    "Release",
    "ReleaseEvent",
    "Rollout",
    "RuntimeToken",
    "ShadowRelease",
    "Version",
    "Webhook",
    "WebhookAttempt",
    "WebhookDelivery",
]
