"""Erasure by principal (docs/data-protection.md): a data-protection request deletes every
trace, snapshot and outcome of one principal, audited, with a receipt."""

from __future__ import annotations

import hashlib

from context_runtime.findings import Finding
from django.db import connection

from console.kernel.audit import AuditAction, audit_record
from console.kernel.errors import NotFound, ValidationFailed
from console.kernel.policy import check_user_can_manage_data_protection
from console.kernel.sessions import require_recent_authentication
from console.kernel.transactions import service_transaction
from traces import stored
from traces.models import Erasure, RequestKey, Snapshot, Trace
from traces.outcomes.models import Outcome


# --- erasure by principal ----------------------------------------------------------------------
def principal_digest(principal: str) -> str:
    return hashlib.sha256(principal.encode()).hexdigest()


@service_transaction
def principal_erase(*, principal: str, reference: str, actor) -> Erasure:
    """Delete every trace of `principal` (in every environment), their candidates, request
    keys and snapshots, and the outcomes reported for those requests; audited, with a receipt
    (counts per table, ids). The receipt and the audit row name the principal by its digest
    only."""
    check_user_can_manage_data_protection(actor, target=("principal", None, "erasure"))
    principal = (principal or "").strip()
    reference = (reference or "").strip()
    found = []
    if not principal:
        found.append(Finding("principal", "required", "Name the principal to erase."))
    if not reference:
        found.append(
            Finding("reference", "required", "Give the data-protection request's reference.")
        )
    elif len(reference) > 200:
        found.append(Finding("reference", "too_long", "At most 200 characters."))
    if found:
        raise ValidationFailed("The erasure cannot run.", details=found)
    require_recent_authentication(actor, action="erase a principal's traces")
    traces = list(
        Trace.objects.filter(principal=principal).values_list(
            "id", "environment_id", "request_id", "occurred_at", "packed_candidates"
        )
    )
    if not traces:
        raise NotFound(
            "No trace names that principal (an erasure that finds nothing removes nothing).",
            code="principal_not_found",
        )
    trace_ids = [t[0] for t in traces]
    by_environment: dict[int, list[str]] = {}
    for _, environment_id, request_id, *_ in traces:
        by_environment.setdefault(environment_id, []).append(request_id)
    outcome_ids: list[int] = []
    for environment_id, request_ids in by_environment.items():
        outcome_ids += list(
            Outcome.objects.filter(
                environment_id=environment_id, request_id__in=request_ids
            ).values_list("id", flat=True)
        )
    snapshot_ids = list(
        Snapshot.objects.filter(trace_id__in=trace_ids).values_list("id", flat=True)
    )
    # The candidates go with their trace's row; the receipt still says how many.
    candidates = sum(len(stored.wire_candidates(t[4])) for t in traces)
    Outcome.objects.filter(id__in=outcome_ids).delete()
    Snapshot.objects.filter(id__in=snapshot_ids).delete()
    request_keys = 0
    for environment_id, request_ids in by_environment.items():
        request_keys += RequestKey.objects.filter(
            environment_id=environment_id, request_id__in=request_ids
        )._raw_delete(RequestKey.objects.db)
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM traces_trace WHERE id = ANY(%s) RETURNING kinds", [trace_ids])
        trace_rows = cursor.rowcount
        erased_kinds = {number for (kinds,) in cursor.fetchall() for number in kinds}
        # A kind's reason may have named the person: those no other trace names go too.
        kinds = stored.kinds_forget(cursor, erased_kinds)
    counts = {
        "traces_trace": trace_rows,
        "candidates": candidates,
        "traces_candidate_kind": kinds,
        "traces_snapshot": len(snapshot_ids),
        "traces_request_key": request_keys,
        "outcomes_outcome": len(outcome_ids),
    }
    removed = {
        "traces_trace": sorted(trace_ids),
        "traces_snapshot": sorted(snapshot_ids),
        "outcomes_outcome": sorted(outcome_ids),
    }
    erasure = Erasure.objects.create(
        principal_digest=principal_digest(principal),
        reference=reference,
        requested_by=actor if getattr(actor, "pk", None) else None,
        requested_by_name=getattr(actor, "username", "") or "system",
        counts=counts,
        removed=removed,
    )
    audit_record(
        actor=actor,
        action=AuditAction.PRINCIPAL_ERASE,
        target=("erasure", erasure.pk, reference),
        after={"principal_sha256": erasure.principal_digest, "counts": counts},
    )
    return erasure


def erasure_receipt(erasure: Erasure) -> dict:
    """The receipt, as downloaded: what was removed, when, by whom, for which request."""
    return {
        "erasure": erasure.pk,
        "reference": erasure.reference,
        "principal_sha256": erasure.principal_digest,
        "requested_by": erasure.requested_by_name,
        "created_at": erasure.created_at.isoformat(),
        "counts": erasure.counts,
        "removed": erasure.removed,
    }
