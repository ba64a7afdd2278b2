"""Operator API for roles, grants, the audit log and the access log (/api/v1/).

Thin: parse with a serializer, ask the policy (`requires`), call a service, answer. Writes
go through console.access.services, which check the actor's scope again and write the audit row.
"""

from __future__ import annotations

import re
from urllib.parse import urlencode

import orjson
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db.models import Q
from django.http import HttpResponse
from django.utils.decorators import method_decorator
from django.utils.translation import ngettext
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import generics, serializers, status
from rest_framework.decorators import api_view, renderer_classes
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.response import Response

from console.access import group_mappings, services
from console.access.selectors import logs_filter, logs_visible_to
from console.access.serializers import (
    AccessLogEntrySerializer,
    AccessLogFilterSerializer,
    AuditExportParamsSerializer,
    AuditRecordSerializer,
    GrantCreateSerializer,
    GrantRevokeSerializer,
    GrantSerializer,
    GroupMappingCreateSerializer,
    GroupMappingSerializer,
    LogFilterSerializer,
    RoleCreateSerializer,
    RoleSerializer,
    RoleUpdateSerializer,
)
from console.kernel.api_schema import ErrorSerializer
from console.kernel.audit import AccessAction, access_record
from console.kernel.errors import NotFound, ValidationFailed
from console.kernel.limits import check_request_size
from console.kernel.models import AccessLogEntry, AuditRecord, Grant, GroupMapping, Role
from console.kernel.policy import Capability, Everywhere, agents_where, refuse, requires
from strategies.catalog.models import Agent

ERRORS = {
    400: OpenApiResponse(ErrorSerializer, description="validation_failed (also: unknown fields)"),
    403: OpenApiResponse(ErrorSerializer, description="forbidden"),
    404: OpenApiResponse(ErrorSerializer, description="not_found (also: out of your scope)"),
    409: OpenApiResponse(ErrorSerializer, description="conflict (a duplicate)"),
    413: OpenApiResponse(ErrorSerializer, description="payload_too_large (over 16 KiB)"),
}
MANAGERS = requires(Capability.MANAGE_GRANTS, agent_kwarg=None, anywhere=True)
AUDITORS = requires(Capability.VIEW_AUDIT, agent_kwarg=None, anywhere=True)


class OperatorPagination(LimitOffsetPagination):
    """The pages of every paginated operator list (the logs here, traces, agents and
    versions): ?limit= as asked, at most `max_limit` rows (a larger ask gets that many)."""

    max_limit = 200


_PAGES: dict[type, type] = {}


def paginated(serializer_class):
    """The schema of one OperatorPagination page of `serializer_class` rows (count, next,
    previous, results) for the function views that paginate by hand (agents, versions,
    traces); generic list views get theirs from drf-spectacular."""
    if serializer_class not in _PAGES:
        name = serializer_class.__name__.removesuffix("Serializer")
        _PAGES[serializer_class] = type(
            f"Paginated{name}List",
            (serializers.Serializer,),
            {
                "count": serializers.IntegerField(),
                "next": serializers.URLField(allow_null=True),
                "previous": serializers.URLField(allow_null=True),
                "results": serializer_class(many=True),
            },
        )
    return _PAGES[serializer_class]


# A role or grant request is a few names and a reason.
REQUEST_BYTES = 16 * 1024


def _valid(request, serializer_class, data=None):
    """Size first (413), then the fields: one the serializer does not declare is refused (a
    typo never silently does nothing), then the serializer's own checks."""
    check_request_size(request, REQUEST_BYTES, what="A roles or grants request")
    data = request.data if data is None else data
    if isinstance(data, dict):
        unknown = sorted(set(data) - set(serializer_class().fields))
        if unknown:
            raise ValidationFailed(
                f"Unknown {ngettext('field', 'fields', len(unknown))}: {', '.join(unknown)}.",
                details=[
                    {"path": k, "code": "unknown_field", "message": "Unknown field."}
                    for k in unknown
                ],
            )
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


# --- roles ------------------------------------------------------------------------------------------
@extend_schema(
    methods=["GET"],
    summary="List roles with their capabilities",
    responses=RoleSerializer(many=True),
)
@extend_schema(
    methods=["POST"],
    summary="Create a role (starts with no capabilities unless given)",
    request=RoleCreateSerializer,
    responses={201: RoleSerializer, **ERRORS},
)
@api_view(["GET", "POST"])
@MANAGERS
def role_list(request):
    if request.method == "POST":
        data = _valid(request, RoleCreateSerializer)
        role = services.role_create(actor=request.user, **data)
        return Response(RoleSerializer(role).data, status=status.HTTP_201_CREATED)
    return Response(RoleSerializer(Role.objects.all(), many=True).data)


def _role(pk) -> Role:
    role = Role.objects.filter(pk=pk).first()
    if role is None:
        raise NotFound("No such role.")
    return role


@extend_schema(methods=["GET"], summary="A role", responses={200: RoleSerializer, 404: ERRORS[404]})
@extend_schema(
    methods=["PATCH"],
    summary="Change a role's name, description or capabilities",
    request=RoleUpdateSerializer,
    responses={200: RoleSerializer, **ERRORS},
)
@api_view(["GET", "PATCH"])
@MANAGERS
def role_detail(request, pk: int):
    role = _role(pk)
    if request.method == "PATCH":
        data = _valid(request, RoleUpdateSerializer)
        role = services.role_update(actor=request.user, role=role, **data)
    return Response(RoleSerializer(role).data)


# --- grants -----------------------------------------------------------------------------------------
def _grants_visible_to(user):
    agents = agents_where(user, Capability.MANAGE_GRANTS)
    return (
        Grant.objects.filter(Q(agent__in=agents) | Q(agent__isnull=True))
        .select_related("user", "group", "role", "agent", "created_by", "mapping")
        .order_by("-created_at", "-id")
    )


def _lookup(model, field: str, value, path: str):
    if value in (None, ""):
        return None
    obj = model.objects.filter(**{field: value}).first()
    if obj is None:
        raise ValidationFailed(
            f"Unknown {path}: {value!r}.",
            details=[{"path": path, "code": "does_not_exist", "message": f"No {path} {value!r}."}],
        )
    return obj


@extend_schema(
    methods=["GET"],
    summary="List grants on the agents you manage (and all-agents grants)",
    responses=GrantSerializer(many=True),
)
@extend_schema(
    methods=["POST"],
    summary="Grant a role to a user or group on one agent or all agents",
    request=GrantCreateSerializer,
    responses={201: GrantSerializer, **ERRORS},
)
@api_view(["GET", "POST"])
@MANAGERS
def grant_list(request):
    if request.method == "POST":
        data = _valid(request, GrantCreateSerializer)
        agent = None
        if data.get("agent"):
            agent = Agent.objects.filter(key=data["agent"]).first()
            if agent is None:
                raise NotFound("Not found.")
        grant = services.grant_create(
            actor=request.user,
            role=_lookup(Role, "name", data["role"], "role"),
            agent=agent,
            user=_lookup(get_user_model(), "username", data.get("user"), "user"),
            group=_lookup(Group, "name", data.get("group"), "group"),
            reason=data["reason"],
        )
        return Response(GrantSerializer(grant).data, status=status.HTTP_201_CREATED)
    return Response(GrantSerializer(_grants_visible_to(request.user), many=True).data)


@extend_schema(
    methods=["GET"], summary="A grant", responses={200: GrantSerializer, 404: ERRORS[404]}
)
@extend_schema(
    methods=["DELETE"],
    summary="Revoke a grant (reason required: in the body, or as ?reason=)",
    request=GrantRevokeSerializer,
    responses={204: None, **ERRORS},
)
@api_view(["GET", "DELETE"])
@MANAGERS
def grant_detail(request, pk: int):
    grant = (
        Grant.objects.select_related("user", "group", "role", "agent", "mapping")
        .filter(pk=pk)
        .first()
    )
    if grant is None:
        raise NotFound("Not found.")
    if request.method == "DELETE":
        # The reason may come in the body or, for clients that send no body with DELETE,
        # as ?reason=.
        data = _valid(request, GrantRevokeSerializer, request.data or request.query_params)
        services.grant_revoke(actor=request.user, grant=grant, reason=data["reason"])
        return Response(status=status.HTTP_204_NO_CONTENT)
    if not _grants_visible_to(request.user).filter(pk=grant.pk).exists():
        refuse(  # a grant on an agent the user does not manage
            NotFound("Not found."),
            user=request.user,
            capability=Capability.MANAGE_GRANTS,
            agent=grant.agent,
            target=grant,
        )
    return Response(GrantSerializer(grant).data)


# --- group mappings (issue 33: an identity provider's group → a role) ------------------------------
MAPPERS = requires(Everywhere(Capability.MANAGE_GRANTS), agent_kwarg=None)


def _mapping_agents(value) -> tuple[list, bool]:
    """("all" | [agent keys]) → (agents, all_agents); an unknown key is a 400."""
    if value == "all":
        return [], True
    if not isinstance(value, list) or not all(isinstance(k, str) for k in value):
        raise ValidationFailed(
            'agents: "all" or a list of agent keys.',
            details=[{"path": "agents", "code": "invalid", "message": 'Give "all" or keys.'}],
        )
    found = {a.key: a for a in Agent.objects.filter(key__in=value)}
    missing = [k for k in value if k not in found]
    if missing:
        raise ValidationFailed(
            f"Unknown agent {missing[0]!r}.",
            details=[{"path": "agents", "code": "does_not_exist", "message": f"{missing}"}],
        )
    return [found[k] for k in dict.fromkeys(value)], False


def _mappings():
    return GroupMapping.objects.select_related("created_by").prefetch_related("agents")


@extend_schema(
    methods=["GET"],
    summary="List the mappings of identity-provider groups to roles",
    responses=GroupMappingSerializer(many=True),
)
@extend_schema(
    methods=["POST"],
    summary="Map an identity provider's group to a role on all agents or named agents",
    description="Takes effect at each member's next sign-in (and at once through SCIM). The "
    "mapper must hold every capability of the role wherever it applies.",
    request=GroupMappingCreateSerializer,
    responses={201: GroupMappingSerializer, **ERRORS},
)
@api_view(["GET", "POST"])
@MAPPERS
def group_mapping_list(request):
    if request.method == "POST":
        data = _valid(request, GroupMappingCreateSerializer)
        agents, all_agents = _mapping_agents(data.get("agents", "all"))
        mapping = group_mappings.group_mapping_create(
            actor=request.user,
            provider=data["provider"],
            group=data["group"],
            role=_lookup(Role, "name", data["role"], "role"),
            agents=agents,
            all_agents=all_agents,
            reason=data["reason"],
        )
        return Response(GroupMappingSerializer(mapping).data, status=status.HTTP_201_CREATED)
    return Response(GroupMappingSerializer(_mappings(), many=True).data)


@extend_schema(
    methods=["GET"],
    summary="A group mapping",
    responses={200: GroupMappingSerializer, 404: ERRORS[404]},
)
@extend_schema(
    methods=["DELETE"],
    summary="Remove a group mapping and, at once, every grant it made (reason required: in "
    "the body, or as ?reason=)",
    request=GrantRevokeSerializer,
    responses={204: None, **ERRORS},
)
@api_view(["GET", "DELETE"])
@MAPPERS
def group_mapping_detail(request, pk: int):
    mapping = _mappings().filter(pk=pk).first()
    if mapping is None:
        raise NotFound("Not found.")
    if request.method == "DELETE":
        data = _valid(request, GrantRevokeSerializer, request.data or request.query_params)
        group_mappings.group_mapping_delete(
            actor=request.user, mapping=mapping, reason=data["reason"]
        )
        return Response(status=status.HTTP_204_NO_CONTENT)
    return Response(GroupMappingSerializer(mapping).data)


# --- logs -------------------------------------------------------------------------------------------
class _LogList(generics.ListAPIView):
    """Rows of agents where you hold VIEW_AUDIT, newest first, filtered like the pages."""

    model = None
    pagination_class = OperatorPagination

    filter_serializer = None

    def get_queryset(self):
        params = self.filter_serializer(data=self.request.query_params)
        params.is_valid(raise_exception=True)
        return logs_filter(logs_visible_to(self.request.user, self.model), **params.validated_data)


LOG_ERRORS = {400: ERRORS[400], 403: ERRORS[403]}


@method_decorator(AUDITORS, name="get")
@extend_schema(
    summary="The audit log",
    parameters=[LogFilterSerializer],
    responses={200: AuditRecordSerializer(many=True), **LOG_ERRORS},
)
class AuditList(_LogList):
    model = AuditRecord
    filter_serializer = LogFilterSerializer
    serializer_class = AuditRecordSerializer


@method_decorator(AUDITORS, name="get")
@extend_schema(
    summary="The access log",
    parameters=[AccessLogFilterSerializer],
    responses={200: AccessLogEntrySerializer(many=True), **LOG_ERRORS},
)
class AccessLogList(_LogList):
    model = AccessLogEntry
    filter_serializer = AccessLogFilterSerializer
    serializer_class = AccessLogEntrySerializer


# --- the audit export (JSON Lines with a cursor, for a SIEM) -------------------------------------
class JSONLinesRenderer(BaseRenderer):
    """`application/x-ndjson`: a list of rows, one JSON object a line. Errors stay one JSON
    document in the error shape, as `application/json`."""

    media_type = "application/x-ndjson"
    format = "ndjson"
    charset = None

    def render(self, data, accepted_media_type=None, renderer_context=None):
        response = (renderer_context or {}).get("response")
        if response is not None and response.status_code >= 400 or not isinstance(data, list):
            if response is not None:
                response["Content-Type"] = "application/json"
            return orjson.dumps(data)
        return b"".join(json_line(row) for row in data)


# orjson escapes U+0000–U+001F only. DEL, the C1 controls (U+0080–U+009F, with NEL U+0085) and
# U+2028/U+2029 stay raw, and many line readers (Python's splitlines, JavaScript) break a line
# there: each is written as its \u escape, so a record is one line for any reader. In UTF-8
# these bytes only ever start a character, so the match cannot cut one in half.
_LINE_BREAKERS = re.compile(rb"\x7f|\xc2[\x80-\x9f]|\xe2\x80[\xa8\xa9]")


def _escaped(match: re.Match) -> bytes:
    return b"\\u%04x" % ord(match.group().decode())


def json_line(row) -> bytes:
    """One JSON Lines record: the row as compact JSON with every control character and line
    separator escaped, then a newline."""
    return _LINE_BREAKERS.sub(_escaped, orjson.dumps(row)) + b"\n"


NEXT_CURSOR = "X-Next-Cursor"


@extend_schema(
    summary="Export the audit log as JSON Lines, oldest first, after a cursor",
    description=(
        "One audit row a line (every field, with before/after/changes and the chain hashes), "
        "in id order after `after`, at most `limit` rows. Poll with the `X-Next-Cursor` of "
        "the previous answer as the next `after` (also in the `Link: rel=next` header): rows "
        "commit in id order, so none is lost or repeated. Same filters and visibility as "
        "the audit list; the export is written to the access log (audit.export)."
    ),
    parameters=[
        AuditExportParamsSerializer,
        OpenApiParameter(
            NEXT_CURSOR,
            OpenApiTypes.INT,
            OpenApiParameter.HEADER,
            response=[200],
            description="The id of the last row sent (the cursor itself when none was).",
        ),
    ],
    responses={
        (200, "application/x-ndjson"): OpenApiResponse(
            response=AuditRecordSerializer,
            description="One AuditRecord object a line.",
        ),
        **LOG_ERRORS,
    },
)
@api_view(["GET"])
@renderer_classes([JSONLinesRenderer, JSONRenderer])
@AUDITORS
def audit_export(request):
    params = _valid(request, AuditExportParamsSerializer, request.query_params)
    after, limit = params.pop("after"), params.pop("limit")
    visible = logs_filter(logs_visible_to(request.user, AuditRecord), **params)
    rows = list(visible.filter(id__gt=after).order_by("id")[:limit])
    cursor = rows[-1].pk if rows else after
    access_record(
        actor=request.user,
        action=AccessAction.AUDIT_EXPORT,
        target=("console.auditrecord", cursor, f"audit export after #{after}"),
        detail={
            "format": "ndjson",
            "after": after,
            "limit": limit,
            "rows": len(rows),
            "next": cursor,
            "filters": {k: str(v) for k, v in params.items() if v},
        },
    )
    data = AuditRecordSerializer(rows, many=True).data
    if isinstance(request.accepted_renderer, JSONLinesRenderer):
        # Built here rather than rendered: DRF drops the Content-Type of an empty body, and
        # an empty page (nothing new yet) is the usual answer to a poll.
        response = HttpResponse(
            request.accepted_renderer.render(data), content_type=JSONLinesRenderer.media_type
        )
    else:
        response = Response(data)
    query = {k: v for k, v in request.query_params.items() if k not in ("after", "limit")}
    next_url = request.build_absolute_uri(
        request.path + "?" + urlencode({**query, "after": cursor, "limit": limit})
    )
    response[NEXT_CURSOR] = str(cursor)
    response["Link"] = f'<{next_url}>; rel="next"'
    return response
