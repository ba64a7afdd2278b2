"""Operator API for agents, documents and versions (/api/v1/). Thin: parse, ask the policy
(`@requires`), call one service or selector, serialize. Errors come out in the shared shape."""

from __future__ import annotations

from context_runtime import vocabulary
from django.db import IntegrityError
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    inline_serializer,
)
from rest_framework.decorators import api_view
from rest_framework.response import Response

from console.access.api import OperatorPagination, paginated
from console.kernel.errors import Conflict, NotFound, ValidationFailed
from console.kernel.policy import Capability, requires
from console.kernel.transactions import service_transaction
from strategies.catalog.selectors import environment_get
from strategies.documents import selectors, services
from strategies.documents.serializers import (
    DiffSerializer,
    DocumentCreatedSerializer,
    DocumentCreateRequest,
    DocumentSerializer,
    DraftCreateRequest,
    DraftUpdateRequest,
    ErrorSerializer,
    FreezeRequest,
    ValidateRequest,
    ValidationReportSerializer,
    VersionSerializer,
    VersionSummarySerializer,
    parse_strict,
)

# The envelope around a body (revision, note, kind, environment) may add this much.
ENVELOPE_BYTES = 8 * 1024

ERRORS = {
    400: OpenApiResponse(ErrorSerializer, description="Malformed or invalid input."),
    403: OpenApiResponse(ErrorSerializer, description="Not allowed on this agent."),
    404: OpenApiResponse(ErrorSerializer, description="Unknown, or outside your scope."),
}
WRITE_ERRORS = {
    **ERRORS,
    409: OpenApiResponse(ErrorSerializer, description="Stale revision; `current` holds the draft."),
    413: OpenApiResponse(ErrorSerializer, description="Body larger than 64 KiB."),
}
CREATE_ERRORS = {
    **WRITE_ERRORS,
    409: OpenApiResponse(
        ErrorSerializer, description="The agent already has a document by that key."
    ),
}


def _parse(request, serializer_class) -> dict:
    return parse_strict(
        request,
        serializer_class,
        limit=vocabulary.MAX_BODY_BYTES + ENVELOPE_BYTES,
        what="A document request",
    )


def _page(request, items, serializer_class) -> Response:
    paginator = OperatorPagination()  # at most OperatorPagination.max_limit rows
    page = paginator.paginate_queryset(items, request)
    return paginator.get_paginated_response(serializer_class(page, many=True).data)


def _document(request, document_key: str):
    return selectors.document_get(agent=request.agent, key=document_key)


def _draft(document):
    draft = selectors.draft_get(document=document)
    if draft is None:
        raise NotFound(f"{document} has no open draft.", code="no_draft")
    return draft


def _document_out(document) -> dict:
    """A document as the list shows it: newest frozen version, open draft, live versions."""
    document.latest = selectors.latest_frozen(document=document)
    document.draft = selectors.draft_get(document=document)
    document.live = selectors.live_versions(document=document)
    return DocumentSerializer(document).data


def _version_out(document, version) -> dict:
    live = selectors.live_versions(document=document)
    version.live_in = [env for env, v in live.items() if v.pk == version.pk]
    return VersionSerializer(version).data


@extend_schema(
    methods=["GET"],
    operation_id="v1_agents_documents_list",  # a page, not a bare list: named as the list it is
    summary="List an agent's documents",
    responses={
        200: inline_serializer("DocumentListOut", {"results": DocumentSerializer(many=True)}),
        **ERRORS,
    },
    tags=["documents"],
)
@extend_schema(
    methods=["POST"],
    operation_id="v1_agents_documents_create",
    summary="Create a strategy and its first draft (nothing is written if the body is invalid)",
    request=DocumentCreateRequest,
    responses={201: DocumentCreatedSerializer, **CREATE_ERRORS},
    tags=["documents"],
)
@api_view(["GET", "POST"])
def document_list(request, agent):
    # One URL, a rule per method (REQUIRED): reading needs VIEW_CONFIG, creating EDIT_DRAFTS.
    if request.method == "POST":
        return _document_create(request, agent=agent)
    return _document_list(request, agent=agent)


@requires(Capability.VIEW_CONFIG)
def _document_list(request, agent):
    docs = selectors.document_list(agent=request.agent)
    return Response({"results": DocumentSerializer(docs, many=True).data})


@service_transaction
def _document_with_draft(*, agent, key: str, name: str, body, note: str, actor):
    """The strategy and its first draft in one transaction: a body that fails validation
    leaves no document behind."""
    document = services.document_create(agent=agent, key=key, name=name, actor=actor)
    draft = services.draft_create(document=document, body=body, note=note, actor=actor)
    return document, draft


@requires(Capability.EDIT_DRAFTS)
def _document_create(request, agent):
    data = _parse(request, DocumentCreateRequest)
    try:
        document, draft = _document_with_draft(
            agent=request.agent,
            key=data["key"],
            name=data["name"],
            body=data["body"],
            note=data["note"],
            actor=request.user,
        )
    except IntegrityError as exc:  # a concurrent create of the same key won the race
        raise Conflict(
            f"{request.agent.key} already has a document named {data['key']}.",
            code="document_exists",
        ) from exc
    return Response(
        {"document": _document_out(document), "draft": _version_out(document, draft)},
        status=201,
    )


@extend_schema(
    summary="Get one document: newest version, open draft, what is live where",
    responses={200: DocumentSerializer, **ERRORS},
    tags=["documents"],
)
@api_view(["GET"])
@requires(Capability.VIEW_CONFIG)
def document_detail(request, agent, document):
    return Response(_document_out(_document(request, document)))


@extend_schema(
    operation_id="v1_agents_documents_versions_list",  # a page, not a bare list: named as the list it is
    summary="List a document's versions, newest first",
    responses={200: paginated(VersionSummarySerializer), **ERRORS},
    tags=["documents"],
)
@api_view(["GET"])
@requires(Capability.VIEW_CONFIG)
def version_list(request, agent, document):
    doc = _document(request, document)
    return _page(request, selectors.version_list(document=doc), VersionSummarySerializer)


@extend_schema(
    summary="Get one version with its body",
    responses={200: VersionSerializer, **ERRORS},
    tags=["documents"],
)
@api_view(["GET"])
@requires(Capability.VIEW_CONFIG)
def version_detail(request, agent, document, number):
    doc = _document(request, document)
    return Response(_version_out(doc, selectors.version_get(document=doc, number=number)))


@extend_schema(
    methods=["POST"],
    summary="Open a draft (409 when one is open)",
    request=DraftCreateRequest,
    responses={201: VersionSerializer, **WRITE_ERRORS},
    tags=["documents"],
)
@extend_schema(
    methods=["PUT"],
    summary="Save the draft with the revision you loaded (409 with `current` when stale)",
    request=DraftUpdateRequest,
    responses={200: VersionSerializer, **WRITE_ERRORS},
    tags=["documents"],
)
@extend_schema(
    methods=["DELETE"],
    summary="Discard the open draft",
    request=None,
    responses={204: None, **WRITE_ERRORS},
    tags=["documents"],
)
@api_view(["POST", "PUT", "DELETE"])
@requires(Capability.EDIT_DRAFTS)
def draft(request, agent, document):
    doc = _document(request, document)
    if request.method == "POST":
        data = _parse(request, DraftCreateRequest)
        created = services.draft_create(
            document=doc, body=data["body"], note=data["note"], actor=request.user
        )
        return Response(_version_out(doc, created), status=201)
    if request.method == "PUT":
        data = _parse(request, DraftUpdateRequest)
        saved = services.draft_update(
            draft=_draft(doc),
            body=data["body"],
            revision=data["revision"],
            note=data.get("note"),
            actor=request.user,
        )
        return Response(_version_out(doc, saved))
    services.draft_discard(draft=_draft(doc), actor=request.user)
    return Response(status=204)


@extend_schema(
    summary="Freeze the draft into an immutable version",
    request=FreezeRequest,
    responses={200: VersionSerializer, **WRITE_ERRORS},
    tags=["documents"],
)
@api_view(["POST"])
@requires(Capability.EDIT_DRAFTS)
def draft_freeze(request, agent, document):
    doc = _document(request, document)
    data = _parse(request, FreezeRequest)
    frozen = services.version_freeze(
        draft=_draft(doc),
        revision=data.get("revision"),
        note=data.get("note"),
        actor=request.user,
    )
    return Response(_version_out(doc, frozen))


@extend_schema(
    summary="Field-by-field changes from version a to version b",
    parameters=[
        OpenApiParameter("a", int, required=True, description="Earlier version number."),
        OpenApiParameter("b", int, required=True, description="Later version number."),
    ],
    responses={200: DiffSerializer, **ERRORS},
    tags=["documents"],
)
@api_view(["GET"])
@requires(Capability.VIEW_CONFIG)
def version_diff(request, agent, document):
    doc = _document(request, document)
    numbers = {}
    for name in ("a", "b"):
        value = request.query_params.get(name, "")
        if not value.isdigit():
            raise ValidationFailed(
                f"Give {name} as a version number.",
                details=[{"path": name, "code": "required", "message": "A version number."}],
            )
        numbers[name] = int(value)
    before = selectors.version_get(document=doc, number=numbers["a"])
    after = selectors.version_get(document=doc, number=numbers["b"])
    changes = selectors.version_diff(document=doc, before=before, after=after)
    return Response({**numbers, "changes": [c.as_dict() for c in changes]})


@extend_schema(
    summary="Validate a body (and against an environment's manifest) without saving",
    request=ValidateRequest,
    responses={200: ValidationReportSerializer, 413: WRITE_ERRORS[413], **ERRORS},
    tags=["documents"],
)
@api_view(["POST"])
@requires(Capability.VIEW_CONFIG)
def document_validate(request, agent):
    data = _parse(request, ValidateRequest)
    environment = environment_get(key=data["environment"]) if data.get("environment") else None
    report = selectors.document_validate(
        kind=data["kind"], body=data["body"], environment=environment
    )
    return Response(report.as_dict())
