"""Operator API for your own personal API tokens (/api/v1/me/tokens/). Only your own: another
person's token is 404, even for an admin (admins revoke them on the access pages)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.decorators import api_view
from rest_framework.response import Response

from console.accounts.personal_tokens import (
    check_session_manages_tokens,
    personal_token_create,
    personal_token_revoke,
    personal_tokens_of,
)
from console.accounts.serializers import (
    PersonalTokenCreatedSerializer,
    PersonalTokenCreateSerializer,
    PersonalTokenSerializer,
)
from console.kernel.api_schema import ErrorSerializer
from console.kernel.credentials import shows_secret
from console.kernel.errors import NotFound
from console.kernel.limits import check_request_size

BODY_LIMIT = 16 * 1024
TAGS = ["personal tokens"]
# Managing tokens is for a signed-in session: a request made with a token is refused.
TOKEN_REFUSED = "token_cannot_manage_tokens: a token cannot list, read or revoke tokens"


def _error(description: str) -> OpenApiResponse:
    return OpenApiResponse(response=ErrorSerializer, description=description)


@extend_schema(
    methods=["GET"],
    summary="List your personal API tokens (revoked and expired ones too)",
    tags=TAGS,
    responses={
        200: PersonalTokenSerializer(many=True),
        401: _error("not_authenticated"),
        403: _error(TOKEN_REFUSED),
    },
)
@extend_schema(
    methods=["POST"],
    summary="Create a personal API token; its secret is in this answer only",
    tags=TAGS,
    request=PersonalTokenCreateSerializer,
    responses={
        201: PersonalTokenCreatedSerializer,
        400: _error("validation_failed, unknown_field, scope_too_wide (names the capability)"),
        401: _error("not_authenticated"),
        403: _error("token_cannot_create_tokens: a token cannot make tokens"),
        409: _error("duplicate_name: you already have a token with this name"),
        413: _error("payload_too_large"),
    },
)
@shows_secret
@api_view(["GET", "POST"])
def personal_token_list(request):
    if request.method == "POST":
        check_request_size(request, BODY_LIMIT)
        body = PersonalTokenCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        token, secret = personal_token_create(user=request.user, **body.validated_data)
        token.token = secret
        return Response(PersonalTokenCreatedSerializer(token).data, status=status.HTTP_201_CREATED)
    check_session_manages_tokens(request.user)
    tokens = personal_tokens_of(request.user)
    return Response(PersonalTokenSerializer(tokens, many=True).data)


@extend_schema(
    methods=["GET"],
    summary="One of your personal API tokens",
    tags=TAGS,
    responses={
        200: PersonalTokenSerializer,
        403: _error(TOKEN_REFUSED),
        404: _error("not_found (also: not yours)"),
    },
)
@extend_schema(
    methods=["DELETE"],
    summary="Revoke one of your personal API tokens (at once)",
    tags=TAGS,
    request=None,
    responses={
        204: None,
        403: _error(TOKEN_REFUSED),
        404: _error("not_found (also: not yours)"),
        409: _error("already_revoked"),
    },
)
@api_view(["GET", "DELETE"])
def personal_token_detail(request, pk: int):
    check_session_manages_tokens(request.user)  # before the lookup: 403, never a 404 probe
    token = personal_tokens_of(request.user).filter(pk=pk).first()
    if token is None:
        raise NotFound("No such token.")
    if request.method == "DELETE":
        personal_token_revoke(token=token, actor=request.user, reason="revoked through the API")
        return Response(status=status.HTTP_204_NO_CONTENT)
    return Response(PersonalTokenSerializer(token).data)
