"""A runtime reports what it implements (docs/runtime-contract.md §2).

A report that would leave a live version unservable is refused (409 `manifest_breaks_live`),
the way a schema registry refuses an incompatible schema: the environment's manifest is one
document the publish checks of everyone depend on, and "last writer wins" let one stray
runtime (the SDK's example run once with the environment's token) block every publish there.
The refusal names each live version and what the reported runtime lacks; the runtime's SDK
logs it and does not retry. A runtime that really stopped implementing something goes the
expand/contract way: publish versions that no longer need it, then deploy the runtime (its
next report is accepted). `manage.py manifest_load` stays the deliberate, audited override.
"""

from __future__ import annotations

from dataclasses import dataclass

from context_runtime.findings import blocking
from context_runtime.manifest import Manifest as RuntimeManifest
from context_runtime.manifest import validate_manifest

from console.kernel.audit import AccessAction, access_record, actor_label
from console.kernel.errors import Conflict, Forbidden
from console.kernel.transactions import service_transaction
from strategies.catalog.dependents import runtime_report_guarded
from strategies.catalog.models import Environment, Manifest
from strategies.catalog.selectors import manifest_latest, manifest_wire
from strategies.catalog.services import manifest_record
from strategies.releases.selectors import live_findings


@dataclass(frozen=True)
class ManifestReport:
    manifest: Manifest
    created: bool
    warnings: list[dict]


MANIFEST_SCOPE_MESSAGE = (
    "A manifest describes the runtime of the whole environment (every agent's sections, "
    "including which are sensitive), so only a token for all agents may write it; this token "
    "is limited to some agents. Report the manifest with an all-agents token."
)
BREAKS_LIVE = "manifest_breaks_live"


def manifest_writer_check(actor) -> None:
    """403 for a runtime token not for every agent (limited to some, or to none once they
    are deleted): a manifest is environment-wide (it could declassify a sensitive section
    for agents the token does not cover)."""
    if not getattr(actor, "all_agents", False):
        raise Forbidden(MANIFEST_SCOPE_MESSAGE)


def manifest_report_refusal(*, environment: Environment, body) -> Conflict | None:
    """What storing `body` as `environment`'s manifest would break, without writing: a 409
    naming every live version it could no longer serve, or None (it breaks nothing, it is
    the manifest already stored, or it is malformed — `manifest_record` answers that 400)."""
    if not isinstance(body, dict) or blocking(validate_manifest(body)):
        return None
    latest = manifest_latest(environment=environment)
    if (
        latest is not None
        and latest.content_hash == manifest_wire(environment=environment, body=body)[1]
    ):
        return None
    candidate = RuntimeManifest.from_dict(body, name=environment.key)
    broken = live_findings(environment=environment, candidate=candidate)
    if not broken:
        return None
    names = ", ".join(f"{w['agent']} {w['document']} v{w['version']}" for w in broken)
    kept = (
        f"The console keeps what the {environment.key} runtime reported before "
        f"({_reported_words(latest)}). "
        if latest is not None
        else ""
    )
    return Conflict(
        f"Manifest refused: the {environment.key} runtime that sent it could not serve what is "
        f"live there ({names}). {kept}If this runtime is not the {environment.key} one, give it "
        f"its own environment's token; if it is, publish versions that no longer need what it "
        "lacks first, then report again.",
        code=BREAKS_LIVE,
        details=[
            {
                "path": error["path"],
                "code": error["code"],
                "message": f"{w['agent']} {w['document']} v{w['version']} (live): "
                f"{error['message']}",
            }
            for w in broken
            for error in w["errors"]
        ],
        extra={"live": broken},
    )


def _reported_words(row: Manifest) -> str:
    who = row.runtime or "a runtime"
    if row.instance:
        who += f" on {row.instance}"
    return f"{who}, {row.created_at:%Y-%m-%d %H:%M} UTC"


def manifest_report(*, environment: Environment, body, actor, instance: str = "") -> ManifestReport:
    """A runtime reports what it implements (docs/runtime-contract.md §2): refused (409) when
    it would leave a live version unservable — the refusal written to the access log once
    the transaction rolled back, for the runtimes page —, else stored by the one manifest
    service (an identical manifest keeps its version), then the live releases it no longer
    supports come back as warnings (none once the refusal passed, unless `manifest_load` set
    one that breaks live). Only an all-agents token may report it; `instance` says which
    process did. The environment's redaction rules run first (docs/data-protection.md): on
    the body, and on the process's name, an identifier."""
    body = runtime_report_guarded(environment.pk, body)
    if instance:
        instance = runtime_report_guarded(environment.pk, {"instance": instance})["instance"]
    try:
        return _manifest_report(environment=environment, body=body, actor=actor, instance=instance)
    except Conflict as refused:
        if refused.code == BREAKS_LIVE:
            access_record(
                actor=actor,
                action=AccessAction.MANIFEST_REFUSE,
                target=environment,
                outcome="denied",
                detail={
                    "runtime": str(body.get("runtime", ""))[:200],
                    "instance": instance,
                    "token": actor_label(actor),
                    "live": [
                        f"{w['agent']} {w['document']} v{w['version']}"
                        for w in refused.extra["live"]
                    ],
                    "findings": len(refused.details),
                },
            )
        raise


@service_transaction(durable=True)
def _manifest_report(*, environment: Environment, body, actor, instance: str) -> ManifestReport:
    manifest_writer_check(actor)
    refusal = manifest_report_refusal(environment=environment, body=body)
    if refusal is not None:
        raise refusal
    manifest, created = manifest_record(
        environment=environment,
        body=body,
        reported_by=actor_label(actor),
        instance=instance,
        actor=actor,
    )
    return ManifestReport(
        manifest=manifest, created=created, warnings=live_findings(environment=environment)
    )
