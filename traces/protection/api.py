"""Operator API for data protection (/api/v1/): an environment's redaction rules and their
preview, erasures by principal and their receipts (docs/data-protection.md)."""

from __future__ import annotations

from django.http import JsonResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.decorators import api_view
from rest_framework.response import Response

from console.kernel.api_schema import ErrorSerializer, StrictSerializer
from console.kernel.limits import check_request_size
from console.kernel.policy import check_user_can_manage_data_protection
from strategies.catalog.selectors import environment_get
from traces.models import RedactionRule
from traces.protection import selectors, services
from traces.redaction import rules
from traces.redaction.detectors import MAX_PATTERN_CHARS

REQUEST_BYTES = 16 * 1024


class RuleOut(serializers.Serializer):
    key = serializers.CharField(help_text="The marker's name: [redacted:<key>].")
    detector = serializers.ChoiceField(choices=RedactionRule.Detector.values)
    pattern = serializers.CharField(help_text="A custom rule's regular expression; else empty.")
    action = serializers.ChoiceField(choices=RedactionRule.Action.values)
    created_at = serializers.DateTimeField()


class RuleCreateRequest(StrictSerializer):
    detector = serializers.ChoiceField(choices=RedactionRule.Detector.values)
    action = serializers.ChoiceField(choices=RedactionRule.Action.values, default="redact")
    key = serializers.CharField(
        max_length=50, required=False, allow_blank=True, help_text="A custom rule's name."
    )
    pattern = serializers.CharField(
        max_length=MAX_PATTERN_CHARS,
        required=False,
        allow_blank=True,
        trim_whitespace=False,
        help_text="A custom rule's regular expression (Python `regex` syntax).",
    )


class RedactionPreviewRequest(StrictSerializer):
    text = serializers.CharField(max_length=2000, trim_whitespace=False)


class RedactionPreviewOut(serializers.Serializer):
    text = serializers.CharField(help_text="As a free-text field would be stored.")
    counts = serializers.DictField(child=serializers.IntegerField(), help_text="Rule → matches.")
    refused = serializers.CharField(allow_null=True, help_text="Why the item would be refused.")


class ErasureRequest(StrictSerializer):
    principal = serializers.CharField(max_length=200, help_text="The trace's `principal`.")
    reference = serializers.CharField(
        max_length=200, help_text="The data-protection request's reference, e.g. DPO-2026-17."
    )


class ErasureOut(serializers.Serializer):
    erasure = serializers.IntegerField()
    reference = serializers.CharField()
    principal_sha256 = serializers.CharField(help_text="The principal, by its SHA-256 only.")
    requested_by = serializers.CharField()
    created_at = serializers.CharField()
    counts = serializers.DictField(child=serializers.IntegerField(), help_text="Table → rows.")
    removed = serializers.DictField(
        child=serializers.ListField(child=serializers.IntegerField()), help_text="Table → ids."
    )


def _rule_out(rule) -> dict:
    return {**rules.rule_state(rule), "created_at": rule.created_at}


_ERRORS = {
    400: OpenApiResponse(ErrorSerializer, description="Invalid; nothing saved."),
    403: OpenApiResponse(ErrorSerializer),
    404: OpenApiResponse(ErrorSerializer),
}


@extend_schema(
    methods=["GET"],
    operation_id="redaction_rules_list",
    summary="An environment's redaction rules (admins)",
    responses={200: RuleOut(many=True), **_ERRORS},
    tags=["data protection"],
)
@extend_schema(
    methods=["POST"],
    operation_id="redaction_rules_add",
    summary="Add a redaction rule (admins; audited)",
    description=(
        "A built-in detector (card, iban, email, phone, nric; named after it) or a custom "
        "pattern (`key`, `pattern`). A pattern that does not compile, is longer than "
        f"{MAX_PATTERN_CHARS} characters, matches the empty string or ordinary text, or is "
        "catastrophically slow is refused (400 with the reason at `pattern`) and nothing is "
        "saved. `action` redact keeps a marker and the count; refuse rejects the item "
        "(`personal_data`). See docs/data-protection.md."
    ),
    request=RuleCreateRequest,
    responses={201: RuleOut, 409: OpenApiResponse(ErrorSerializer), **_ERRORS},
    tags=["data protection"],
)
@api_view(["GET", "POST"])
def redaction_rules(request, environment: str):
    env = environment_get(key=environment)
    check_user_can_manage_data_protection(request.user, target=("environment", env.pk, env.key))
    if request.method == "GET":
        return Response([_rule_out(r) for r in selectors.redaction_rules(environment=env)])
    check_request_size(request, REQUEST_BYTES, what="A redaction rule")
    serializer = RuleCreateRequest(data=request.data)
    serializer.is_valid(raise_exception=True)
    rule = rules.redaction_rule_add(
        environment=env, actor=request.user, **serializer.validated_data
    )
    return Response(_rule_out(rule), status=201)


@extend_schema(
    operation_id="redaction_rules_remove",
    summary="Remove a redaction rule (admins; audited)",
    responses={204: None, **_ERRORS},
    tags=["data protection"],
)
@api_view(["DELETE"])
def redaction_rule_detail(request, environment: str, rule: str):
    env = environment_get(key=environment)
    check_user_can_manage_data_protection(request.user, target=("environment", env.pk, env.key))
    found = selectors.redaction_rule_get(environment=env, key=rule)
    rules.redaction_rule_remove(rule=found, actor=request.user)
    return Response(status=204)


@extend_schema(
    operation_id="redaction_rules_preview",
    summary="What the environment's rules make of a text (admins)",
    request=RedactionPreviewRequest,
    responses={200: RedactionPreviewOut, **_ERRORS},
    tags=["data protection"],
)
@api_view(["POST"])
def redaction_preview(request, environment: str):
    env = environment_get(key=environment)
    check_user_can_manage_data_protection(request.user, target=("environment", env.pk, env.key))
    check_request_size(request, REQUEST_BYTES, what="A preview")
    serializer = RedactionPreviewRequest(data=request.data)
    serializer.is_valid(raise_exception=True)
    text, counts, refused = rules.rules_preview(env, serializer.validated_data["text"])
    return Response({"text": text, "counts": counts, "refused": refused})


@extend_schema(
    methods=["GET"],
    operation_id="erasures_list",
    summary="Erasures by principal, newest first (admins)",
    responses={200: ErasureOut(many=True), **_ERRORS},
    tags=["data protection"],
)
@extend_schema(
    methods=["POST"],
    operation_id="erasures_run",
    summary="Erase a principal's traces, snapshots and outcomes (admins; audited)",
    description=(
        "Deletes every trace whose `principal` is the one given, in every environment, with "
        "its candidates, request key and snapshot, and the outcomes reported for those "
        "requests. Answers the receipt (counts per table, ids); the receipt and the audit "
        "row name the principal by its SHA-256 only. 404 when no trace names it. Needs a "
        "recent sign-in in a session (401 reauthentication_required)."
    ),
    request=ErasureRequest,
    responses={201: ErasureOut, **_ERRORS},
    tags=["data protection"],
)
@api_view(["GET", "POST"])
def erasures(request):
    check_user_can_manage_data_protection(request.user, target=("erasure", None, "erasures"))
    if request.method == "GET":
        return Response([services.erasure_receipt(e) for e in selectors.erasures()])
    check_request_size(request, REQUEST_BYTES, what="An erasure")
    serializer = ErasureRequest(data=request.data)
    serializer.is_valid(raise_exception=True)
    erasure = services.principal_erase(actor=request.user, **serializer.validated_data)
    return Response(services.erasure_receipt(erasure), status=201)


@extend_schema(
    operation_id="erasures_receipt",
    summary="An erasure's receipt (admins)",
    responses={200: ErasureOut, **_ERRORS},
    tags=["data protection"],
)
@api_view(["GET"])
def erasure_detail(request, pk: int):
    check_user_can_manage_data_protection(request.user, target=("erasure", pk, "receipt"))
    erasure = selectors.erasure_get(pk=pk)
    response = JsonResponse(services.erasure_receipt(erasure))
    response["Content-Disposition"] = f'attachment; filename="erasure-{erasure.pk}-receipt.json"'
    return response
