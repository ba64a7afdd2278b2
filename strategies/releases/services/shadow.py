"""Shadow releases: a frozen strategy version runs beside the live one in an environment —
the runtime selects with it on the same requests and reports what it would have chosen,
serving only the live one. Start and stop change nothing users see, so they need no
approval, even where the environment is protected; promoting a shadow is a publish of its
version, with every rule of a publish. Each is one transaction with its audit row, its
history event, the re-rendered payload (a new ETag, the config stream's NOTIFY) and its
webhook (`shadow.changed`)."""

from __future__ import annotations

from console.kernel.policy import check_user_can_shadow
from console.kernel.reasons import reason_clean
from console.kernel.transactions import service_transaction
from strategies.catalog.models import Environment
from strategies.delivery import config as runtime_config
from strategies.documents.models import Document, Version
from strategies.releases.models import ShadowRelease
from strategies.releases.selectors import (
    ALREADY_LIVE,
    STALE_REVISION,
    shadow_get,
    shadow_refusals,
)
from strategies.releases.services.checks import shadow_refuse
from strategies.releases.services.publish import PublishOutcome, release_publish
from strategies.releases.services.shadow_move import NO_SHADOW, _shadow_move, _shadow_notify
from strategies.releases.services.state import _current, shadow_conflict
from strategies.releases.transitions import shadow_allows


def _changed(change, *, actor) -> ShadowRelease:
    rendered = runtime_config.payload_refresh(
        agent=change.shadow.document.agent, environment=change.shadow.environment
    )
    _shadow_notify(change, etag=rendered.etag, actor=actor)
    return change.shadow


@service_transaction(durable=True)
def shadow_start(
    *,
    version: Version,
    environment: Environment,
    actor,
    reason: str = "",
    expected_revision: int | None = None,
) -> ShadowRelease:
    """Run `version` as shadow in `environment`, beside what is live there. Refused like a
    publish where the runtime cannot serve it, and where its manifest does not declare shadow
    support; the live version itself is allowed (the A/A test). `expected_revision`: the
    shadow revision the caller loaded (0: none was ever started here)."""
    document = version.document
    refusals = shadow_refusals(
        version=version, environment=environment, actor=actor, expected_revision=expected_revision
    )
    shadow_refuse(refusals, version=version, environment=environment, actor=actor)
    change = _shadow_move(
        document=document,
        environment=environment,
        live=_current(document, environment),
        to_version=version,
        actor=actor,
        reason=reason.strip(),
        expected_revision=expected_revision,
    )
    return _changed(change, actor=actor)


def _running(document, environment, *, version_number, what: str) -> ShadowRelease:
    """The shadow running here, and (when the caller named it) of the version they saw."""
    shadow = shadow_get(document=document, environment=environment)
    if not shadow_allows(shadow, what):
        raise shadow_conflict(
            document,
            environment,
            f"No shadow of {document.key} runs in {environment.key}: nothing to {what}.",
            code=NO_SHADOW,
        )
    if version_number is not None and shadow.version.number != version_number:
        raise shadow_conflict(
            document,
            environment,
            f"The shadow of {document.key} in {environment.key} is v{shadow.version.number} "
            f"now, not v{version_number}. Reload and decide again.",
            code=STALE_REVISION,
        )
    return shadow


@service_transaction(durable=True)
def shadow_stop(
    *,
    document: Document,
    environment: Environment,
    actor,
    reason: str,
    expected_revision: int | None = None,
) -> ShadowRelease:
    """Stop the shadow running here, saying why (recorded in the history and audit log)."""
    check_user_can_shadow(actor, environment, document.agent, target=document)
    reason = reason_clean(
        reason, ask="Say why you stop the shadow (recorded in the history and the audit log)."
    )
    _running(document, environment, version_number=None, what="stop")
    change = _shadow_move(
        document=document,
        environment=environment,
        live=_current(document, environment),
        to_version=None,
        actor=actor,
        reason=reason,
        expected_revision=expected_revision,
    )
    return _changed(change, actor=actor)


@service_transaction(durable=True)
def shadow_promote(
    *,
    document: Document,
    environment: Environment,
    actor,
    reason: str = "",
    version: int | None = None,
    expected_revision: int | None = None,
) -> PublishOutcome:
    """Put the shadow's version live: a publish of it, with every rule of a publish (the
    runtime's check, the rights, and in a protected environment an approval request instead).
    The shadow stops when that publish takes effect — now, or when the request is approved —
    and runs on meanwhile. `version`: the shadow version the caller saw (another one: 409);
    `expected_revision`: the release revision, as for a publish."""
    check_user_can_shadow(actor, environment, document.agent, target=document)
    shadow = _running(document, environment, version_number=version, what="promote")
    live = _current(document, environment)
    if live is not None and live.version_id == shadow.version_id:
        raise shadow_conflict(
            document,
            environment,
            f"{document.key} v{shadow.version.number} is already live in {environment.key}: "
            "this shadow runs the live version itself (an A/A test). Stop it instead.",
            code=ALREADY_LIVE,
        )
    return release_publish(
        version=shadow.version,
        environment=environment,
        actor=actor,
        reason=reason,
        expected_revision=expected_revision,
    )
