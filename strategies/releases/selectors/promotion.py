"""Promotion: the steps of the promotion order the user may promote along, and what
publishing to one environment what is live in another would change, per document."""

from __future__ import annotations

from dataclasses import dataclass

from console.kernel.policy import user_can_publish_to
from strategies.catalog.models import Environment
from strategies.catalog.selectors import environment_list
from strategies.documents.models import Document
from strategies.releases.models import ApprovalRequest, Release
from strategies.releases.selectors.publish import ChangePreview, change_preview


def promotion_pairs(*, user, agent) -> list[tuple[Environment, Environment]]:
    """(source, target) for each step of the promotion order (sg-test → bank-uat → prod)
    where the user may publish to the target: the agent's "Promote …" actions."""
    envs = environment_list()
    return [
        (source, target)
        for source, target in zip(envs, envs[1:], strict=False)
        if user_can_publish_to(user, target, agent)
    ]


@dataclass
class PromotionRow:
    """One document of a promotion preview: what the source serves, what the target serves."""

    document: Document
    source_release: Release | None
    target_release: Release | None
    pending: ApprovalRequest | None  # a request already waiting in the target
    preview: ChangePreview | None  # set when the document would change
    impact: dict | None = None  # its saved impact preview in the target (the page sets it)

    @property
    def changes(self) -> bool:
        return self.preview is not None


def promotion_preview(*, agent, source: Environment, target: Environment, documents=None):
    """What "publish to `target` what is live in `source`" would do, per document (all of
    the agent's when `documents` is None): the plain-English diff and the checks against the
    target runtime for each one that would change."""
    if documents is None:
        documents = list(Document.objects.filter(agent=agent).order_by("kind", "key"))
    live = {
        (r.document_id, r.environment_id): r
        for r in Release.objects.filter(
            document__in=documents, environment__in=[source, target]
        ).select_related("version", "environment", "document__agent")
    }
    waiting = {
        a.document_id: a
        for a in ApprovalRequest.objects.filter(
            document__in=documents, environment=target, status=ApprovalRequest.Status.PENDING
        ).select_related("version", "requested_by")
    }
    rows = []
    for document in documents:
        have = live.get((document.pk, target.pk))
        want = live.get((document.pk, source.pk))
        changes = want is not None and (have is None or have.version_id != want.version_id)
        rows.append(
            PromotionRow(
                document=document,
                source_release=want,
                target_release=have,
                pending=waiting.get(document.pk),
                preview=change_preview(version=want.version, environment=target)
                if changes
                else None,
            )
        )
    return rows
