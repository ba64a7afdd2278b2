"""Publish a version (or the open draft) to an environment, and roll back to one that was
live there before."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.decorators import api_view

from console.kernel.errors import NotFound
from console.kernel.policy import Capability, requires
from strategies.catalog.selectors import environment_get
from strategies.documents import selectors as documents
from strategies.releases import selectors
from strategies.releases import services as releases
from strategies.releases.api.common import TAGS, WRITE_ERRORS, _outcome, _parse
from strategies.releases.serializers import (
    PublishRequest,
    ReleaseOutcomeSerializer,
    RollbackRequest,
)


# --- publish and rollback ------------------------------------------------------------------------
def _version(document, number):
    if number == "draft":
        draft = documents.draft_get(document=document)
        if draft is None:
            raise NotFound(f"{document.key} has no open draft.", code="no_draft")
        return draft
    return documents.version_get(document=document, number=number)


@extend_schema(
    summary="Publish a version (or the open draft) to an environment",
    description="200 with the release when it is live; 202 with the approval request when "
    "the environment is protected.",
    request=PublishRequest,
    responses={200: ReleaseOutcomeSerializer, 202: ReleaseOutcomeSerializer, **WRITE_ERRORS},
    tags=TAGS,
)
@api_view(["POST"])
@requires(Capability.VIEW_CONFIG)  # the service checks the right to publish here
def release_publish(request, agent, document, environment):
    data = _parse(request, PublishRequest)
    doc = documents.document_get(agent=request.agent, key=document)
    env = environment_get(key=environment)
    outcome = releases.release_publish(
        version=_version(doc, data["version"]),
        environment=env,
        actor=request.user,
        reason=data["reason"],
        expected_revision=data.get("expected_revision"),
    )
    return _outcome(outcome)


@extend_schema(
    summary="Roll back to a version that was live in this environment before",
    description="200 with the release at once; 202 with the approval request where the "
    "environment's revert policy asks for a second person.",
    request=RollbackRequest,
    responses={200: ReleaseOutcomeSerializer, 202: ReleaseOutcomeSerializer, **WRITE_ERRORS},
    tags=TAGS,
)
@api_view(["POST"])
@requires(Capability.ROLLBACK)
def release_rollback(request, agent, document, environment):
    data = _parse(request, RollbackRequest)
    doc = documents.document_get(agent=request.agent, key=document)
    env = environment_get(key=environment)
    release = selectors.live_release(document=doc, environment=env)
    if release is None:
        raise NotFound(f"Nothing of {doc.key} is live in {env.key}: nothing to roll back.")
    outcome = releases.release_rollback(
        release=release,
        to_version=documents.version_get(document=doc, number=data["version"]),
        actor=request.user,
        reason=data["reason"],
        expected_revision=data.get("expected_revision"),
    )
    return _outcome(outcome)
