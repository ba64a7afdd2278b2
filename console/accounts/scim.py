"""SCIM 2.0 provisioning (issue 33, item 5; RFC 7643/7644; docs/sso.md "SCIM provisioning"):
an identity provider's SCIM client creates, changes, deactivates and deletes people and
groups, with its own bearer credential (a ScimToken, one provider key each).

- A SCIM user is a console account without a password, linked to the provider by a ScimUser
  row; its first sign-in through that provider links it to the ID token's subject
  (console.accounts.sso_accounts).
- Each membership change, group rename or group delete calls groups_sync for the people it
  touches, with their SCIM groups' displayName and externalId: mapped grants follow at once.
- Deactivation (active=false by PUT or PATCH, or DELETE) makes the account inactive, deletes
  every session of theirs, revokes every personal token, and removes the grants their
  groups' mappings gave (grants by hand stay); their audit history stays. Reactivation
  restores the account and its mapped grants, not the tokens.

Every change is one transaction and audited, the actor naming the SCIM token
(`scim:<provider>:<token name>`). Refusals are ScimError: the API answers them in SCIM's
error shape, and nothing is written.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import timedelta
from importlib import import_module

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.db.models.functions import Lower
from django.utils import timezone

from console.access.group_mappings import groups_sync
from console.accounts.models import ScimGroup, ScimToken, ScimUser
from console.accounts.personal_tokens import personal_tokens_revoke_all
from console.accounts.scim_filter import (
    GROUP_ATTRS,
    USER_ATTRS,
    Path,
    ScimFilterError,
    filter_q,
    path_parse,
)
from console.accounts.sso_accounts import free_username, scim_groups_of
from console.kernel.audit import AuditAction, acting_token, audit_record
from console.kernel.credentials import secret_hash, secret_new, secret_shown
from console.kernel.errors import Conflict, Forbidden, ValidationFailed
from console.kernel.models import GroupMapping
from console.kernel.policy import Capability, check_user_can, check_user_can_grant_role, refuse
from console.kernel.sso_providers import KEY_PATTERN, providers
from console.kernel.transactions import service_transaction

TOKEN_PREFIX = "scim_"
NAME_MAX = 100
TEXT_MAX = 255
LAST_USED_EVERY = timedelta(seconds=30)
USER_SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:User"
GROUP_SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:Group"
ENTERPRISE_SCHEMA = "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User"
PATCH_SCHEMA = "urn:ietf:params:scim:api:messages:2.0:PatchOp"
# What a client may send but the console never keeps (read-only or secret).
NOT_KEPT = {"id", "meta", "schemas", "password", "groups"}
PATCH_OPS_MAX = 1000


class ScimError(Exception):
    """A refusal in SCIM's terms: HTTP status, scimType (RFC 7644 §3.12) and plain words."""

    def __init__(self, status: int, detail: str, scim_type: str | None = None):
        super().__init__(detail)
        self.status, self.detail, self.scim_type = status, detail, scim_type


def _invalid(detail: str, scim_type: str = "invalidValue") -> ScimError:
    return ScimError(400, detail, scim_type)


@dataclass(frozen=True)
class ScimActor:
    """Who acts in a SCIM request: the token, audited as the system named
    `scim:<provider>:<token name>`. Never a user: it holds no grant and passes no policy
    check; it can only do what the SCIM services do."""

    name: str
    provider: str
    token_id: int
    is_system = True
    is_authenticated = True  # to DRF: the request is authenticated (by its SCIM token)
    is_active = False
    pk = None

    def __str__(self) -> str:
        return self.name


def actor_for(token: ScimToken) -> ScimActor:
    return ScimActor(
        name=f"scim:{token.provider}:{token.name}", provider=token.provider, token_id=token.pk
    )


# --- tokens -------------------------------------------------------------------------------------
def _token_state(token: ScimToken) -> dict:
    return {"provider": token.provider, "name": token.name, "prefix": token.prefix}


def provider_configured(key: str) -> bool:
    return key in providers()


def _check_may_provision(actor, provider: str) -> None:
    """MANAGE_GRANTS on all agents, and every role the provider's mappings grant, wherever
    they grant it: the token can grant whatever those mappings grant (the escalation rule)."""
    if acting_token(actor) is not None:
        refuse(
            Forbidden(
                "A personal token cannot manage SCIM tokens: sign in.",
                code="token_cannot_manage_tokens",
            ),
            user=actor,
            capability=Capability.MANAGE_GRANTS,
        )
    check_user_can(actor, Capability.MANAGE_GRANTS)
    mappings = GroupMapping.objects.filter(provider=provider, role__isnull=False)
    for mapping in mappings.select_related("role").prefetch_related("agents"):
        for agent in [None] if mapping.all_agents else mapping.agents.all():
            check_user_can_grant_role(actor, mapping.role, agent)


@service_transaction(durable=True)
def scim_token_create(*, actor, provider: str, name: str) -> tuple[ScimToken, str]:
    """A SCIM token for `provider` (any key of the providers' pattern; it need not be
    configured yet, the page says so); returns (token, secret), the secret shown once."""
    provider = (provider or "").strip()
    if not KEY_PATTERN.fullmatch(provider):
        raise ValidationFailed(
            "Name the identity provider by its key: lower-case letters, digits and '-'.",
            details=[{"path": "provider", "code": "invalid", "message": "Not a provider key."}],
        )
    name = (name or "").strip()
    if not name or len(name) > NAME_MAX:
        raise ValidationFailed(
            "Give the token a name that says which SCIM client uses it.",
            details=[
                {"path": "name", "code": "required", "message": f"1 to {NAME_MAX} characters."}
            ],
        )
    _check_may_provision(actor, provider)
    if ScimToken.objects.filter(provider=provider, name=name, revoked_at__isnull=True).exists():
        raise Conflict(
            f"{provider} already has a SCIM token named “{name}”; choose another name or revoke it.",
            code="duplicate_name",
            details=[{"path": "name", "code": "duplicate", "message": "Already used."}],
        )
    secret = secret_new(TOKEN_PREFIX)
    token = ScimToken.objects.create(
        provider=provider,
        name=name,
        prefix=secret_shown(secret, TOKEN_PREFIX),
        token_hash=secret_hash(secret),
        created_by=actor if getattr(actor, "pk", None) else None,
    )
    audit_record(
        actor=actor,
        action=AuditAction.SCIM_TOKEN_CREATE,
        target=token,
        after={**_token_state(token), "provider_configured": provider_configured(provider)},
    )
    return token, secret


@service_transaction(durable=True)
def scim_token_revoke(*, actor, token: ScimToken) -> ScimToken:
    """Revoke at once: its next request is 401."""
    _check_may_provision(actor, token.provider)
    token = ScimToken.objects.select_for_update().get(pk=token.pk)
    if token.revoked_at is not None:
        raise Conflict("This SCIM token is already revoked.", code="already_revoked")
    token.revoked_at = timezone.now()
    token.revoked_by = actor if getattr(actor, "pk", None) else None
    token.save(update_fields=["revoked_at", "revoked_by"])
    audit_record(
        actor=actor,
        action=AuditAction.SCIM_TOKEN_REVOKE,
        target=token,
        before={**_token_state(token), "revoked_at": None},
        after={"revoked_at": token.revoked_at.isoformat()},
    )
    return token


def scim_token_for_secret(secret: str) -> ScimToken | None:
    """The unrevoked token with this secret, None otherwise; notes its use (at most twice a
    minute: one UPDATE, no read)."""
    if not secret.startswith(TOKEN_PREFIX):
        return None
    token = ScimToken.objects.filter(
        token_hash=secret_hash(secret), revoked_at__isnull=True
    ).first()
    if token is not None:
        now = timezone.now()
        if token.last_used_at is None or now - token.last_used_at >= LAST_USED_EVERY:
            ScimToken.objects.filter(pk=token.pk).update(last_used_at=now)
            token.last_used_at = now
    return token


# --- attributes: PATCH operations on a resource's JSON ------------------------------------------
def _key(container: dict, name: str) -> str:
    """The key of `container` that is `name` case-insensitively (SCIM attribute names are),
    else `name`."""
    return next((k for k in container if k.lower() == name.lower()), name)


def _container(attributes: dict, path: Path) -> dict:
    if path.urn is None:
        return attributes
    inner = attributes.setdefault(_key(attributes, path.urn), {})
    if not isinstance(inner, dict):
        raise _invalid(f"{path.urn} is not an object.", "invalidPath")
    return inner


def _merge(attributes: dict, op: str, value) -> None:
    """A PATCH without a path: each attribute of `value` added or replaced."""
    if not isinstance(value, dict):
        raise _invalid("An operation without a path needs an object as its value.")
    for name, item in value.items():
        if name.lower().startswith("urn:") and isinstance(item, dict):
            if name.lower() in (USER_SCHEMA.lower(), GROUP_SCHEMA.lower()):
                _merge(attributes, op, item)
            else:
                inner = attributes.setdefault(_key(attributes, name), {})
                if not isinstance(inner, dict):
                    raise _invalid(f"{name} is not an object.", "invalidPath")
                _merge(inner, op, item)
            continue
        key = _key(attributes, name)
        if op == "add" and isinstance(item, list) and isinstance(attributes.get(key), list):
            attributes[key] = attributes[key] + [i for i in item if i not in attributes[key]]
        else:
            attributes[key] = item


def _patch_one(attributes: dict, op: str, path: Path, value) -> None:
    container = _container(attributes, path)
    key = _key(container, path.attr)
    if path.where is None and path.sub is None:
        if op == "remove":
            container.pop(key, None)
        elif op == "add" and isinstance(value, list) and isinstance(container.get(key), list):
            container[key] = container[key] + [i for i in value if i not in container[key]]
        else:
            container[key] = value
        return
    if path.where is None:  # name.givenName
        inner = container.setdefault(key, {})
        if not isinstance(inner, dict):
            raise _invalid(f"{path.attr} is not an object.", "invalidPath")
        if op == "remove":
            inner.pop(_key(inner, path.sub), None)
        else:
            inner[_key(inner, path.sub)] = value
        return
    items = container.setdefault(key, [])  # emails[type eq "work"].value
    if not isinstance(items, list):
        raise _invalid(f"{path.attr} is not a list.", "invalidPath")
    where_key, where_value = path.where
    matches = [
        i
        for i in items
        if isinstance(i, dict) and str(i.get(_key(i, where_key), "")) == where_value
    ]
    if op == "remove":
        if path.sub:
            for item in matches:
                item.pop(_key(item, path.sub), None)
        else:
            container[key] = [i for i in items if not any(i is m for m in matches)]
        return
    if not matches:
        matches = [{where_key: where_value}]
        items.append(matches[0])
    for item in matches:
        if path.sub:
            item[_key(item, path.sub)] = value
        elif isinstance(value, dict):
            item.update(value)
        else:
            raise _invalid(f"{path.attr}[…] takes an object.")


def _operations(body) -> list[tuple[str, Path | None, object]]:
    """(op, path, value) of a PatchOp body; ops as Okta ("replace") or Entra ("Replace")
    spell them."""
    if not isinstance(body, dict):
        raise _invalid("A PATCH body is a JSON object.", "invalidSyntax")
    operations = body.get(_key(body, "Operations"))
    if not isinstance(operations, list) or not operations or len(operations) > PATCH_OPS_MAX:
        raise _invalid(
            f"A PATCH body has Operations: a list of 1 to {PATCH_OPS_MAX} operations.",
            "invalidSyntax",
        )
    out = []
    for operation in operations:
        if not isinstance(operation, dict):
            raise _invalid("Each operation is a JSON object.", "invalidSyntax")
        op = operation.get(_key(operation, "op"))
        if not isinstance(op, str) or op.lower() not in ("add", "remove", "replace"):
            raise _invalid(f"Unknown op {op!r}: add, remove or replace.", "invalidSyntax")
        raw_path = operation.get(_key(operation, "path"))
        try:
            path = path_parse(raw_path) if raw_path not in (None, "") else None
        except ScimFilterError as exc:
            raise _invalid(str(exc), "invalidPath") from None
        if op.lower() == "remove" and path is None:
            raise _invalid("A remove operation needs a path.", "noTarget")
        out.append((op.lower(), path, operation.get(_key(operation, "value"))))
    return out


# --- users --------------------------------------------------------------------------------------
def _check_storable(value, path: str = "") -> None:
    """invalidValue for a NUL character anywhere (PostgreSQL cannot store it), naming where."""
    if isinstance(value, str):
        if "\x00" in value:
            raise _invalid(f"{path or 'A value'} holds a NUL character (\\u0000).")
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_storable(key, path)
            _check_storable(item, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for n, item in enumerate(value):
            _check_storable(item, f"{path}[{n}]")


def _text(attributes: dict, name: str, *, required: bool = False) -> str:
    value = attributes.get(_key(attributes, name))
    if value is None or value == "":
        if required:
            raise _invalid(f"{name} is required.")
        return ""
    if not isinstance(value, str) or len(value) > TEXT_MAX or "\x00" in value:
        raise _invalid(f"{name} is a string of at most {TEXT_MAX} characters.")
    return value.strip()


def _active(attributes: dict) -> bool:
    """active as a JSON boolean, or as Entra sends it in PATCH: the string "True"/"False"."""
    value = attributes.get(_key(attributes, "active"), True)
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        value = value.strip().lower() == "true"
    if not isinstance(value, bool):
        raise _invalid("active is true or false.")
    attributes[_key(attributes, "active")] = value
    return value


@dataclass(frozen=True)
class UserFields:
    user_name: str
    external_id: str
    active: bool
    email: str
    given: str
    family: str
    attributes: dict


def _user_fields(data) -> UserFields:
    """A User resource checked and read: invalidValue (400) for anything the console cannot
    keep, naming it."""
    if not isinstance(data, dict):
        raise _invalid("A User is a JSON object.", "invalidSyntax")
    attributes = {k: v for k, v in data.items() if k.lower() not in NOT_KEPT}
    _check_storable(attributes)
    user_name = _text(attributes, "userName", required=True)
    external_id = _text(attributes, "externalId")
    _text(attributes, "displayName")
    active = _active(attributes)
    name = attributes.get(_key(attributes, "name")) or {}
    emails = attributes.get(_key(attributes, "emails")) or []
    if not isinstance(name, dict) or not isinstance(emails, list):
        raise _invalid("name is an object and emails a list.")
    if not all(isinstance(e, dict) for e in emails):
        raise _invalid("Each of emails is an object with a value.")
    primary = [e for e in emails if e.get("primary") in (True, "true", "True")] + emails
    email = next((e.get("value") for e in primary if isinstance(e.get("value"), str)), "")
    if not email and "@" in user_name:
        email = user_name
    given, family = name.get("givenName") or "", name.get("familyName") or ""
    if not all(isinstance(v, str) for v in (email, given, family)):
        raise _invalid("name's parts and e-mail addresses are strings.")
    return UserFields(
        user_name=user_name,
        external_id=external_id,
        active=active,
        email=email[:254],
        given=given[:150],
        family=family[:150],
        attributes=attributes,
    )


def _user_state(link: ScimUser) -> dict:
    return {
        "provider": link.provider,
        "userName": link.user_name,
        "externalId": link.external_id,
        "active": link.active,
        "account": link.user.get_username(),
    }


def _check_unique_user_name(provider: str, user_name: str, exclude_pk=None) -> None:
    taken = ScimUser.objects.annotate(lower_name=Lower("user_name")).filter(
        provider=provider, lower_name=user_name.lower()
    )
    if taken.exclude(pk=exclude_pk).exists():
        raise ScimError(409, f"userName {user_name} is already provisioned.", "uniqueness")


def _save_unique(row) -> None:
    """Save in a savepoint: a concurrent writer's equal name is 409 uniqueness, not a 500."""
    try:
        with transaction.atomic():
            row.save()
    except IntegrityError:
        raise ScimError(409, f"{row} is already provisioned.", "uniqueness") from None


def _sessions_end(user) -> int:
    """Delete every stored session signed in as `user`; returns how many."""
    store = import_module(settings.SESSION_ENGINE).SessionStore
    model = store.get_model_class()
    ended = [
        session.pk
        for session in model.objects.filter(expire_date__gt=timezone.now()).iterator()
        if str(session.get_decoded().get("_auth_user_id")) == str(user.pk)
    ]
    model.objects.filter(pk__in=ended).delete()
    return len(ended)


def _sync(link: ScimUser, actor: ScimActor) -> None:
    """Bring the person's mapped grants in line with their SCIM groups (none while inactive)."""
    groups = scim_groups_of(link.user, link.provider) if link.active else set()
    groups_sync(user=link.user, provider=link.provider, groups=groups, actor=actor)


def _deactivated(link: ScimUser, actor: ScimActor, why: str) -> dict:
    user = link.user
    user.is_active = False
    user.save(update_fields=["is_active"])
    sessions = _sessions_end(user)
    tokens = personal_tokens_revoke_all(user=user, actor=actor, reason=why)
    groups_sync(user=user, provider=link.provider, groups=(), actor=actor)
    return {"sessions_ended": sessions, "personal_tokens_revoked": tokens}


def _user_write(link: ScimUser, fields: UserFields, actor: ScimActor, *, created: bool) -> None:
    """Store `fields` on `link` and its account; (de)activate as `active` says; audit."""
    before = None if created else _user_state(link)
    was_active = link.active and link.user.is_active
    link.user_name = fields.user_name
    link.external_id = fields.external_id
    link.active = fields.active
    link.attributes = fields.attributes
    _save_unique(link)
    user = link.user
    user.email, user.first_name, user.last_name = fields.email, fields.given, fields.family
    user.save(update_fields=["email", "first_name", "last_name"])
    after = _user_state(link)
    if created:
        audit_record(actor=actor, action=AuditAction.SCIM_USER_CREATE, target=user, after=after)
    elif before != after:
        audit_record(
            actor=actor,
            action=AuditAction.SCIM_USER_UPDATE,
            target=user,
            before=before,
            after=after,
        )
    if was_active and not fields.active:
        ended = _deactivated(link, actor, f"deactivated by {actor.name}")
        audit_record(
            actor=actor,
            action=AuditAction.SCIM_USER_DEACTIVATE,
            target=user,
            before={"active": True},
            after={"active": False, **ended},
        )
    elif fields.active and not user.is_active:
        user.is_active = True
        user.save(update_fields=["is_active"])
        audit_record(
            actor=actor,
            action=AuditAction.SCIM_USER_REACTIVATE,
            target=user,
            before={"active": False},
            after={"active": True, "personal_tokens": "stay revoked: the person makes new ones"},
        )
        _sync(link, actor)


def _locked(rows, pk, kind: str):
    """The provider's resource `pk`, locked; 404 for another provider's or an unknown id."""
    row = rows.select_for_update().filter(pk=_pk(pk)).first()
    if row is None:
        raise ScimError(404, f"No {kind} {pk}.")
    return row


def _locked_user(actor: ScimActor, pk) -> ScimUser:
    return _locked(scim_users(actor), pk, "User")


def _pk(value) -> int:
    text = str(value)
    return int(text) if text.isdigit() and len(text) < 18 else 0


@service_transaction(durable=True)
def scim_user_create(*, actor: ScimActor, data) -> ScimUser:
    """POST /Users: a new console account without a password (a username nobody has: a local
    account of the same name is never taken over), linked to the provider."""
    fields = _user_fields(data)
    _check_unique_user_name(actor.provider, fields.user_name)
    user = get_user_model().objects.create_user(username=free_username(fields.user_name))
    user.is_active = fields.active
    user.save(update_fields=["is_active"])
    link = ScimUser(user=user, provider=actor.provider)
    _user_write(link, fields, actor, created=True)
    return link


@service_transaction(durable=True)
def scim_user_replace(*, actor: ScimActor, pk, data) -> ScimUser:
    """PUT /Users/<id>: the resource replaced (Okta's way to update and to deactivate)."""
    link = _locked_user(actor, pk)
    fields = _user_fields(data)
    _check_unique_user_name(actor.provider, fields.user_name, exclude_pk=link.pk)
    _user_write(link, fields, actor, created=False)
    return link


@service_transaction(durable=True)
def scim_user_patch(*, actor: ScimActor, pk, body) -> ScimUser:
    """PATCH /Users/<id>: operations applied in order to the stored resource, then checked
    as a whole (all or nothing)."""
    link = _locked_user(actor, pk)
    operations = _operations(body)
    attributes = copy.deepcopy(link.attributes)
    attributes.update({"userName": link.user_name, "active": link.active})
    for op, path, value in operations:
        if path is None:
            _merge(attributes, op, value)
        else:
            _patch_one(attributes, op, path, value)
    fields = _user_fields(attributes)
    _check_unique_user_name(actor.provider, fields.user_name, exclude_pk=link.pk)
    _user_write(link, fields, actor, created=False)
    return link


@service_transaction(durable=True)
def scim_user_delete(*, actor: ScimActor, pk) -> None:
    """DELETE /Users/<id>: deactivated as above (if still active), then the SCIM link and its
    group memberships go; the account stays, inactive, with its audit history."""
    link = _locked_user(actor, pk)
    state = _user_state(link)
    ended = {}
    if link.active or link.user.is_active:
        link.active = False
        link.save(update_fields=["active"])
        ended = _deactivated(link, actor, f"deleted by {actor.name}")
    link.delete()
    audit_record(
        actor=actor,
        action=AuditAction.SCIM_USER_DELETE,
        target=link.user,
        before=state,
        after={"active": False, "scim_link": None, **ended},
    )


def scim_users(actor: ScimActor):
    """The provider's SCIM users, and only its."""
    return ScimUser.objects.filter(provider=actor.provider).select_related("user")


def scim_users_filtered(actor: ScimActor, text: str | None):
    users = scim_users(actor).prefetch_related("groups")
    if text:
        users = users.filter(_filter(text, USER_ATTRS))
    return users.order_by("pk")


def _filter(text: str, attrs) -> Q:
    try:
        return filter_q(text, attrs)
    except ScimFilterError as exc:
        raise _invalid(str(exc), "invalidFilter") from None


# --- groups -------------------------------------------------------------------------------------
def _group_state(group: ScimGroup, members=None) -> dict:
    if members is None:
        members = group.members.all()
    return {
        "provider": group.provider,
        "displayName": group.display_name,
        "externalId": group.external_id,
        "members": sorted(m.user_name for m in members),
    }


def _member_ids(actor: ScimActor, value) -> set[int]:
    """The ScimUser ids of a `members` value ([{"value": "<id>"}, …]); invalidValue naming
    any that is not one of the provider's users."""
    if value is None:
        return set()
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list) or not all(
        isinstance(m, dict) and isinstance(m.get("value"), str | int) for m in value
    ):
        raise _invalid('members is a list of {"value": "<user id>"}.')
    wanted = {str(m["value"]) for m in value}
    found = {
        str(pk)
        for pk in scim_users(actor)
        .filter(pk__in=[_pk(v) for v in wanted])
        .values_list("pk", flat=True)
    }
    unknown = sorted(wanted - found)
    if unknown:
        raise _invalid(f"No User {', '.join(unknown)} of {actor.provider}.")
    return {int(v) for v in found}


def _group_fields(actor: ScimActor, data, *, members_required: bool = False):
    if not isinstance(data, dict):
        raise _invalid("A Group is a JSON object.", "invalidSyntax")
    display = _text(data, "displayName", required=True)
    external = _text(data, "externalId")
    key = _key(data, "members")
    members = _member_ids(actor, data.get(key)) if key in data or members_required else None
    return display, external, members


def _check_unique_group(provider: str, display: str, exclude_pk=None) -> None:
    taken = ScimGroup.objects.annotate(lower_name=Lower("display_name")).filter(
        provider=provider, lower_name=display.lower()
    )
    if taken.exclude(pk=exclude_pk).exists():
        raise ScimError(409, f"A group named {display} exists already.", "uniqueness")


def _group_write(group, actor, display, external, member_ids, *, created: bool) -> None:
    """Store the group; re-sync everyone whose SCIM groups changed (members who came or
    went, and every member when the group's names changed); audit."""
    before = None if created else _group_state(group)
    old_members = set() if created else set(group.members.values_list("pk", flat=True))
    renamed = not created and (display, external) != (group.display_name, group.external_id)
    group.display_name, group.external_id = display, external
    _save_unique(group)
    if member_ids is not None:
        group.members.set(member_ids)
    new_members = set(group.members.values_list("pk", flat=True))
    touched = (old_members | new_members) if renamed else (old_members ^ new_members)
    after = _group_state(group)
    if created or before != after:
        audit_record(
            actor=actor,
            action=AuditAction.SCIM_GROUP_CREATE if created else AuditAction.SCIM_GROUP_UPDATE,
            target=group,
            before=before,
            after=after,
        )
    _resync(actor, touched)


def _resync(actor: ScimActor, link_pks) -> None:
    for link in scim_users(actor).filter(pk__in=link_pks).order_by("pk"):
        _sync(link, actor)


def _locked_group(actor: ScimActor, pk) -> ScimGroup:
    return _locked(scim_groups(actor), pk, "Group")


@service_transaction(durable=True)
def scim_group_create(*, actor: ScimActor, data) -> ScimGroup:
    display, external, members = _group_fields(actor, data)
    _check_unique_group(actor.provider, display)
    group = ScimGroup(provider=actor.provider)
    _group_write(group, actor, display, external, members, created=True)
    return group


@service_transaction(durable=True)
def scim_group_replace(*, actor: ScimActor, pk, data) -> ScimGroup:
    """PUT /Groups/<id>: displayName and externalId replaced; members replaced when sent
    (a PUT without members keeps them: no client drops every grant by leaving them out)."""
    group = _locked_group(actor, pk)
    display, external, members = _group_fields(actor, data)
    _check_unique_group(actor.provider, display, exclude_pk=group.pk)
    _group_write(group, actor, display, external, members, created=False)
    return group


@service_transaction(durable=True)
def scim_group_patch(*, actor: ScimActor, pk, body) -> ScimGroup:
    """PATCH /Groups/<id>: members added and removed (Okta's and Entra's group push), the
    group renamed; all operations or none."""
    group = _locked_group(actor, pk)
    operations = _operations(body)
    attributes = {"displayName": group.display_name, "externalId": group.external_id}
    members = set(group.members.values_list("pk", flat=True))
    for op, path, value in operations:
        if path is None:
            if not isinstance(value, dict):
                raise _invalid("An operation without a path needs an object as its value.")
            value = dict(value)
            sent = value.pop(_key(value, "members"), None)
            if sent is not None:
                ids = _member_ids(actor, sent)
                members = members | ids if op == "add" else ids
            value = {k: v for k, v in value.items() if k.lower() not in NOT_KEPT}
            _merge(attributes, op, value)
        elif path.attr.lower() == "members" and path.urn is None:
            if path.where is not None:
                if op != "remove" or path.where[0].lower() != "value":
                    raise _invalid('Use remove with members[value eq "<id>"].', "invalidPath")
                members.discard(_pk(path.where[1]))
            elif op == "add":
                members |= _member_ids(actor, value)
            elif op == "replace":
                members = _member_ids(actor, value)
            elif value is None:
                members = set()
            else:
                members -= (
                    {_pk(v.get("value")) for v in value if isinstance(v, dict)}
                    if isinstance(value, list)
                    else set()
                )
        else:
            _patch_one(attributes, op, path, value)
    display = _text(attributes, "displayName", required=True)
    external = _text(attributes, "externalId")
    _check_unique_group(actor.provider, display, exclude_pk=group.pk)
    _group_write(group, actor, display, external, members, created=False)
    return group


@service_transaction(durable=True)
def scim_group_delete(*, actor: ScimActor, pk) -> None:
    """DELETE /Groups/<id>: its members lose the grants its mappings gave, at once."""
    group = _locked_group(actor, pk)
    state = _group_state(group)
    members = set(group.members.values_list("pk", flat=True))
    target = ("console.scimgroup", group.pk, str(group))
    group.delete()
    audit_record(actor=actor, action=AuditAction.SCIM_GROUP_DELETE, target=target, before=state)
    _resync(actor, members)


def scim_groups(actor: ScimActor):
    return ScimGroup.objects.filter(provider=actor.provider)


def scim_groups_filtered(actor: ScimActor, text: str | None):
    groups = scim_groups(actor).prefetch_related("members")
    if text:
        groups = groups.filter(_filter(text, GROUP_ATTRS)).distinct()
    return groups.order_by("pk")


# --- the page -----------------------------------------------------------------------------------
def scim_overview() -> dict:
    """What Access → Provisioning (SCIM) shows: tokens, people, groups, by provider."""
    return {
        "tokens": list(ScimToken.objects.select_related("created_by", "revoked_by")),
        "people": list(ScimUser.objects.select_related("user").prefetch_related("groups")),
        "groups": list(ScimGroup.objects.prefetch_related("members")),
        "configured": set(providers()),
    }
