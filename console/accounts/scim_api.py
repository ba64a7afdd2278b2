"""SCIM 2.0 endpoints under /scim/v2/ (RFC 7644; console.accounts.scim does the work): Users,
Groups, ServiceProviderConfig, ResourceTypes, Schemas — DRF views, so each is in the OpenAPI
schema (/api/schema/, tag `scim`).

Authentication is the SCIM token only (`Authorization: Bearer scim_…`): no session, no
personal token. A missing, unknown or revoked token is 401 in SCIM's error shape and written
to the access log. Every refusal — a malformed body or filter, an unknown id, a taken
userName — leaves in SCIM's error shape (urn:ietf:params:scim:api:messages:2.0:Error) with
its scimType; nothing here answers 500 for bad input.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_not_required
from django.contrib.auth.models import AnonymousUser
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers
from rest_framework.authentication import BaseAuthentication
from rest_framework.permissions import IsAuthenticated
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from console.accounts import scim
from console.accounts.scim import (
    ENTERPRISE_SCHEMA,
    GROUP_SCHEMA,
    USER_SCHEMA,
    ScimError,
)
from console.kernel.api_errors import SCIM_MEDIA, scim_error_body
from console.kernel.audit import AccessAction, access_record
from console.kernel.credentials import bearer_value
from console.kernel.errors import ApplicationError
from console.kernel.parsers import StrictJSONParser

LIST_SCHEMA = "urn:ietf:params:scim:api:messages:2.0:ListResponse"
COUNT_DEFAULT = 100
COUNT_MAX = 200
INDEX_MAX = 2**31  # a startIndex past it answers an empty page, as any past the end does


# --- the wire: parser, renderer, errors, authentication -------------------------------------------
class ScimJSONParser(StrictJSONParser):
    media_type = SCIM_MEDIA


class ScimJSONRenderer(JSONRenderer):
    media_type = SCIM_MEDIA
    format = "scim"


def scim_exception_handler(exc, context):
    """Every refusal in SCIM's error shape."""
    headers = {}
    if isinstance(exc, ScimError):
        status, detail, scim_type = exc.status, exc.detail, exc.scim_type
    elif isinstance(exc, ApplicationError):
        status, detail, scim_type = exc.status, exc.message, None
        if exc.status == 400:
            scim_type = "invalidSyntax" if exc.code == "duplicate_key" else "invalidValue"
    elif isinstance(exc, exceptions.APIException):
        status, detail, scim_type = exc.status_code, str(exc.detail), None
        if isinstance(exc, exceptions.ParseError):
            scim_type = "invalidSyntax"
        if isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed):
            status = 401
            headers["WWW-Authenticate"] = 'Bearer realm="scim"'
        if getattr(exc, "wait", None):
            headers["Retry-After"] = str(int(exc.wait))
    else:
        return None  # not a refusal: a real fault, which the error middleware answers
    return Response(
        scim_error_body(status, detail, scim_type),
        status=status,
        headers=headers,
        content_type=SCIM_MEDIA,
    )


class ScimTokenAuthentication(BaseAuthentication):
    """`Authorization: Bearer scim_…` → the token's ScimActor. Anything else is 401 (and in
    the access log), never a fall back to a session."""

    def authenticate(self, request):
        secret = bearer_value(request.META.get("HTTP_AUTHORIZATION", ""))
        token = scim.scim_token_for_secret(secret) if secret else None
        if token is None:
            reason = "no SCIM bearer token" if secret is None else "unknown or revoked SCIM token"
            access_record(
                actor=AnonymousUser(),
                action=AccessAction.ACCESS_DENIED,
                target=("scim", request.path[:200], request.path[:200]),
                outcome="denied",
                reason=f"SCIM: {reason}",
                detail={"method": request.method, "api": "scim"},
            )
            raise exceptions.AuthenticationFailed(
                f"The SCIM API takes its own bearer token ({scim.TOKEN_PREFIX}…): {reason}."
            )
        return scim.actor_for(token), token

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="scim"'


class ScimTokenScheme(OpenApiAuthenticationExtension):
    target_class = "console.accounts.scim_api.ScimTokenAuthentication"
    name = "scimToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": f"A SCIM token ({scim.TOKEN_PREFIX}…) made on Access → "
            "Provisioning (SCIM) or by `manage.py scim_token`; one identity provider each.",
        }


# --- schema shapes (documentation only: the views read the JSON themselves) ----------------------
class ScimErrorSerializer(serializers.Serializer):
    schemas = serializers.ListField(child=serializers.CharField())
    status = serializers.CharField()
    scimType = serializers.CharField(required=False)  # noqa: N815 - SCIM's name
    detail = serializers.CharField()


class ScimUserSerializer(serializers.Serializer):
    schemas = serializers.ListField(child=serializers.CharField(), required=False)
    id = serializers.CharField(read_only=True)
    userName = serializers.CharField()  # noqa: N815
    externalId = serializers.CharField(required=False)  # noqa: N815
    active = serializers.BooleanField(required=False)
    displayName = serializers.CharField(required=False)  # noqa: N815
    name = serializers.JSONField(required=False)
    emails = serializers.JSONField(required=False)
    groups = serializers.JSONField(read_only=True)
    meta = serializers.JSONField(read_only=True)


class ScimGroupSerializer(serializers.Serializer):
    schemas = serializers.ListField(child=serializers.CharField(), required=False)
    id = serializers.CharField(read_only=True)
    displayName = serializers.CharField()  # noqa: N815
    externalId = serializers.CharField(required=False)  # noqa: N815
    members = serializers.JSONField(required=False)
    meta = serializers.JSONField(read_only=True)


class ScimPatchSerializer(serializers.Serializer):
    schemas = serializers.ListField(child=serializers.CharField())
    Operations = serializers.JSONField(  # noqa: N815
        help_text='[{"op": "add|remove|replace", "path": "…", "value": …}]'
    )


class ScimListSerializer(serializers.Serializer):
    schemas = serializers.ListField(child=serializers.CharField())
    totalResults = serializers.IntegerField()  # noqa: N815
    startIndex = serializers.IntegerField()  # noqa: N815
    itemsPerPage = serializers.IntegerField()  # noqa: N815
    Resources = serializers.JSONField()  # noqa: N815


def _errors(*statuses: int) -> dict:
    words = {
        400: "invalidFilter, invalidValue, invalidSyntax, invalidPath or noTarget.",
        401: "No SCIM token, or an unknown or revoked one.",
        404: "No such resource of this token's provider.",
        406: "The Accept header names no format this answers in.",
        409: "uniqueness: the userName or the group's displayName is taken.",
    }
    return {s: OpenApiResponse(ScimErrorSerializer, description=words[s]) for s in statuses}


LIST_PARAMETERS = [
    OpenApiParameter("filter", OpenApiTypes.STR, description='e.g. userName eq "bjensen"'),
    OpenApiParameter("startIndex", OpenApiTypes.INT, description="1-based."),
    OpenApiParameter("count", OpenApiTypes.INT, description=f"At most {COUNT_MAX}."),
    OpenApiParameter("excludedAttributes", OpenApiTypes.STR, description="members (Groups)."),
]


# --- representations ----------------------------------------------------------------------------
def _meta(request, kind: str, row) -> dict:
    return {
        "resourceType": kind,
        "created": row.created_at.isoformat(),
        "lastModified": row.updated_at.isoformat(),
        "location": request.build_absolute_uri(f"/scim/v2/{kind}s/{row.pk}"),
    }


def user_resource(request, link) -> dict:
    body = {k: v for k, v in link.attributes.items() if k.lower() not in scim.NOT_KEPT}
    schemas = [USER_SCHEMA] + ([ENTERPRISE_SCHEMA] if ENTERPRISE_SCHEMA in body else [])
    body.update(
        schemas=schemas,
        id=str(link.pk),
        userName=link.user_name,
        active=link.active,
        groups=[{"value": str(g.pk), "display": g.display_name} for g in link.groups.all()],
        meta=_meta(request, "User", link),
    )
    if link.external_id:
        body["externalId"] = link.external_id
    return body


def group_resource(request, group, *, members: bool = True) -> dict:
    body = {
        "schemas": [GROUP_SCHEMA],
        "id": str(group.pk),
        "displayName": group.display_name,
        "meta": _meta(request, "Group", group),
    }
    if group.external_id:
        body["externalId"] = group.external_id
    if members:
        body["members"] = [
            {"value": str(m.pk), "display": m.user_name} for m in group.members.all()
        ]
    return body


def _index(request, name: str, default: int) -> int:
    raw = request.query_params.get(name)
    if raw in (None, ""):
        return default
    try:
        return int(raw)
    except ValueError:
        raise ScimError(400, f"{name} is a whole number.", "invalidValue") from None


def _list(request, rows, resource) -> Response:
    start = min(max(_index(request, "startIndex", 1), 1), INDEX_MAX)
    count = min(max(_index(request, "count", COUNT_DEFAULT), 0), COUNT_MAX)
    total = rows.count()
    page = list(rows[start - 1 : start - 1 + count]) if count else []
    return Response(
        {
            "schemas": [LIST_SCHEMA],
            "totalResults": total,
            "startIndex": start,
            "itemsPerPage": len(page),
            "Resources": [resource(row) for row in page],
        },
        content_type=SCIM_MEDIA,
    )


def _answer(body, status: int = 200) -> Response:
    return Response(body, status=status, content_type=SCIM_MEDIA)


# --- views --------------------------------------------------------------------------------------
class ScimView(APIView):
    authentication_classes = [ScimTokenAuthentication]
    permission_classes = [IsAuthenticated]
    parser_classes = [ScimJSONParser, StrictJSONParser]
    renderer_classes = [ScimJSONRenderer, JSONRenderer]
    throttle_classes = []

    def get_exception_handler(self):
        return scim_exception_handler

    @property
    def actor(self):
        return self.request.user


def _body(request):
    """The request's JSON (a parse error becomes invalidSyntax through the handler)."""
    return request.data


class UsersView(ScimView):
    @extend_schema(
        tags=["scim"],
        operation_id="scim_users_list",
        summary='List or find provisioned people (filter=userName eq "…")',
        parameters=LIST_PARAMETERS,
        responses={200: ScimListSerializer, **_errors(400, 401, 406)},
    )
    def get(self, request):
        rows = scim.scim_users_filtered(self.actor, request.query_params.get("filter"))
        return _list(request, rows, lambda link: user_resource(request, link))

    @extend_schema(
        tags=["scim"],
        operation_id="scim_users_create",
        summary="Provision a person: a console account without a password",
        request=ScimUserSerializer,
        responses={201: ScimUserSerializer, **_errors(400, 401, 406, 409)},
    )
    def post(self, request):
        link = scim.scim_user_create(actor=self.actor, data=_body(request))
        return _answer(user_resource(request, link), 201)


class UserView(ScimView):
    @extend_schema(
        tags=["scim"],
        operation_id="scim_user_retrieve",
        summary="A provisioned person",
        responses={200: ScimUserSerializer, **_errors(401, 404, 406)},
    )
    def get(self, request, pk: str):
        link = scim.scim_users(self.actor).filter(pk=scim._pk(pk)).first()
        if link is None:
            raise ScimError(404, f"No User {pk}.")
        return _answer(user_resource(request, link))

    @extend_schema(
        tags=["scim"],
        operation_id="scim_user_replace",
        summary="Replace a person (Okta's update; active=false deactivates)",
        request=ScimUserSerializer,
        responses={200: ScimUserSerializer, **_errors(400, 401, 404, 406, 409)},
    )
    def put(self, request, pk: str):
        link = scim.scim_user_replace(actor=self.actor, pk=pk, data=_body(request))
        return _answer(user_resource(request, link))

    @extend_schema(
        tags=["scim"],
        operation_id="scim_user_patch",
        summary="Change a person by operations (Okta's and Entra's; active false deactivates)",
        request=ScimPatchSerializer,
        responses={200: ScimUserSerializer, **_errors(400, 401, 404, 406, 409)},
    )
    def patch(self, request, pk: str):
        link = scim.scim_user_patch(actor=self.actor, pk=pk, body=_body(request))
        return _answer(user_resource(request, link))

    @extend_schema(
        tags=["scim"],
        operation_id="scim_user_delete",
        summary="Delete a person: deactivated, SCIM link gone, account and audit kept",
        responses={204: None, **_errors(401, 404, 406)},
    )
    def delete(self, request, pk: str):
        scim.scim_user_delete(actor=self.actor, pk=pk)
        return Response(status=204)


class GroupsView(ScimView):
    @extend_schema(
        tags=["scim"],
        operation_id="scim_groups_list",
        summary='List or find groups (filter=displayName eq "…")',
        parameters=LIST_PARAMETERS,
        responses={200: ScimListSerializer, **_errors(400, 401, 406)},
    )
    def get(self, request):
        rows = scim.scim_groups_filtered(self.actor, request.query_params.get("filter"))
        members = "members" not in request.query_params.get("excludedAttributes", "")
        return _list(request, rows, lambda g: group_resource(request, g, members=members))

    @extend_schema(
        tags=["scim"],
        operation_id="scim_groups_create",
        summary="Push a group, with its members",
        request=ScimGroupSerializer,
        responses={201: ScimGroupSerializer, **_errors(400, 401, 406, 409)},
    )
    def post(self, request):
        group = scim.scim_group_create(actor=self.actor, data=_body(request))
        return _answer(group_resource(request, group), 201)


class GroupView(ScimView):
    @extend_schema(
        tags=["scim"],
        operation_id="scim_group_retrieve",
        summary="A group and its members",
        parameters=LIST_PARAMETERS[3:],
        responses={200: ScimGroupSerializer, **_errors(401, 404, 406)},
    )
    def get(self, request, pk: str):
        group = scim.scim_groups(self.actor).filter(pk=scim._pk(pk)).first()
        if group is None:
            raise ScimError(404, f"No Group {pk}.")
        members = "members" not in request.query_params.get("excludedAttributes", "")
        return _answer(group_resource(request, group, members=members))

    @extend_schema(
        tags=["scim"],
        operation_id="scim_group_replace",
        summary="Replace a group (members replaced when sent)",
        request=ScimGroupSerializer,
        responses={200: ScimGroupSerializer, **_errors(400, 401, 404, 406, 409)},
    )
    def put(self, request, pk: str):
        group = scim.scim_group_replace(actor=self.actor, pk=pk, data=_body(request))
        return _answer(group_resource(request, group))

    @extend_schema(
        tags=["scim"],
        operation_id="scim_group_patch",
        summary="Add or remove members, rename (grants from mappings follow at once)",
        request=ScimPatchSerializer,
        responses={200: ScimGroupSerializer, 204: None, **_errors(400, 401, 404, 406, 409)},
    )
    def patch(self, request, pk: str):
        group = scim.scim_group_patch(actor=self.actor, pk=pk, body=_body(request))
        return _answer(group_resource(request, group))

    @extend_schema(
        tags=["scim"],
        operation_id="scim_group_delete",
        summary="Delete a group: its members lose what its mappings granted",
        responses={204: None, **_errors(401, 404, 406)},
    )
    def delete(self, request, pk: str):
        scim.scim_group_delete(actor=self.actor, pk=pk)
        return Response(status=204)


SERVICE_PROVIDER_CONFIG = {
    "schemas": ["urn:ietf:params:scim:schemas:core:2.0:ServiceProviderConfig"],
    "patch": {"supported": True},
    "bulk": {"supported": False, "maxOperations": 0, "maxPayloadSize": 0},
    "filter": {"supported": True, "maxResults": COUNT_MAX},
    "changePassword": {"supported": False},
    "sort": {"supported": False},
    "etag": {"supported": False},
    "authenticationSchemes": [
        {
            "type": "oauthbearertoken",
            "name": "SCIM token",
            "description": f"Authorization: Bearer {scim.TOKEN_PREFIX}…, one per provider.",
            "primary": True,
        }
    ],
    "meta": {"resourceType": "ServiceProviderConfig"},
}


def _attribute(name, kind="string", **more) -> dict:
    return {
        "name": name,
        "type": kind,
        "multiValued": False,
        "required": False,
        "caseExact": False,
        "mutability": "readWrite",
        "returned": "default",
        "uniqueness": "none",
        **more,
    }


SCHEMAS = [
    {
        "id": USER_SCHEMA,
        "name": "User",
        "description": "A person: a console account without a password.",
        "attributes": [
            _attribute("userName", required=True, uniqueness="server"),
            _attribute("externalId", caseExact=True),
            _attribute("displayName"),
            _attribute("active", "boolean"),
            _attribute("name", "complex"),
            _attribute("emails", "complex", multiValued=True),
            _attribute("groups", "complex", multiValued=True, mutability="readOnly"),
        ],
    },
    {
        "id": GROUP_SCHEMA,
        "name": "Group",
        "description": "A group at the identity provider; its displayName or externalId "
        "is what a group mapping names.",
        "attributes": [
            _attribute("displayName", required=True, uniqueness="server"),
            _attribute("externalId", caseExact=True),
            _attribute("members", "complex", multiValued=True),
        ],
    },
]
RESOURCE_TYPES = [
    {
        "schemas": ["urn:ietf:params:scim:schemas:core:2.0:ResourceType"],
        "id": kind,
        "name": kind,
        "endpoint": f"/{kind}s",
        "schema": schema,
        "meta": {"resourceType": "ResourceType"},
        **(
            {"schemaExtensions": [{"schema": ENTERPRISE_SCHEMA, "required": False}]}
            if kind == "User"
            else {}
        ),
    }
    for kind, schema in (("User", USER_SCHEMA), ("Group", GROUP_SCHEMA))
]


class ServiceProviderConfigView(ScimView):
    @extend_schema(
        tags=["scim"],
        operation_id="scim_service_provider_config",
        summary="What this SCIM service supports",
        responses={200: OpenApiTypes.OBJECT, **_errors(401, 406)},
    )
    def get(self, request):
        return _answer(SERVICE_PROVIDER_CONFIG)


class ResourceTypesView(ScimView):
    @extend_schema(
        tags=["scim"],
        operation_id="scim_resource_types",
        summary="User and Group",
        responses={200: ScimListSerializer, **_errors(401, 406)},
    )
    def get(self, request):
        return _answer(
            {
                "schemas": [LIST_SCHEMA],
                "totalResults": len(RESOURCE_TYPES),
                "startIndex": 1,
                "itemsPerPage": len(RESOURCE_TYPES),
                "Resources": RESOURCE_TYPES,
            }
        )


class SchemasView(ScimView):
    @extend_schema(
        tags=["scim"],
        operation_id="scim_schemas",
        summary="The User and Group schemas",
        responses={200: ScimListSerializer, **_errors(401, 406)},
    )
    def get(self, request):
        return _answer(
            {
                "schemas": [LIST_SCHEMA],
                "totalResults": len(SCHEMAS),
                "startIndex": 1,
                "itemsPerPage": len(SCHEMAS),
                "Resources": SCHEMAS,
            }
        )


users = login_not_required(UsersView.as_view())
user = login_not_required(UserView.as_view())
groups = login_not_required(GroupsView.as_view())
group = login_not_required(GroupView.as_view())
service_provider_config = login_not_required(ServiceProviderConfigView.as_view())
resource_types = login_not_required(ResourceTypesView.as_view())
schemas = login_not_required(SchemasView.as_view())
