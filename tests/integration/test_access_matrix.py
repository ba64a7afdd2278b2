"""THE access matrix: every URL of the URL conf × every standard role (granted on the
sample agent, or only on another agent) × anonymous, for GET and each write method the
view accepts — zero unauthorized successes.

The rule for each url name comes from the REQUIRED dict of the url module that defines it
(collected by walking the URL conf), so a new endpoint is covered the moment it is routed,
and an endpoint without a declared rule fails this suite. Django admin is left out here
(superuser-only, see test_access_admin.py), as are static files.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

import pytest
from django.apps import apps
from django.db import transaction
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from console.policy import STANDARD_ROLES, rule_allows
from tests.factories_access import OTHER_AGENT, SAMPLE_AGENT, profile_edit

SKIPPED_PREFIXES = ("django-admin/", "static/", "media/")
RUNTIME_PREFIX = "/api/v1/runtime/"
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]


@dataclass
class Endpoint:
    name: str | None
    route: str
    module: ModuleType | None
    kwargs: list[str]


def walk(patterns, prefix: str = "", module: ModuleType | None = None):
    """Every URLPattern under `patterns`, with its full route and the module defining it."""
    for entry in patterns:
        route = prefix + str(entry.pattern)
        if route.startswith(SKIPPED_PREFIXES):
            continue
        if isinstance(entry, URLResolver):
            inner = entry.urlconf_module
            inner_module = inner if isinstance(inner, ModuleType) else module
            yield from walk(entry.url_patterns, route, inner_module)
        elif isinstance(entry, URLPattern):
            yield Endpoint(
                entry.name,
                route,
                module,
                sorted(entry.pattern.converters) or sorted(entry.pattern.regex.groupindex),
            )


def endpoints() -> list[Endpoint]:
    import console.urls

    return list(walk(get_resolver().url_patterns, "", console.urls))


def rule_for(endpoint: Endpoint):
    return getattr(endpoint.module, "REQUIRED", {}).get(endpoint.name)


# --- sample values for URL kwargs, by kwarg name ------------------------------------------------
# The project fixes kwarg names (agent, document, number, environment, request_id, pk). Values
# point into the sample agent, so "in scope" and "out of scope" mean something.
SIMPLE_SAMPLES = {
    "agent": SAMPLE_AGENT,
    "document": "profile",
    "environment": "sg-test",
    "request_id": "req-92",
}
GENERIC_WORDS = {"api", "list", "detail", "create", "new", "edit", "update", "delete", "revoke"}


def _in_sample_agent(queryset):
    """Prefer an object of the sample agent, following the usual relations."""
    for lookup in (
        "agent__key",
        "document__agent__key",
        "release__document__agent__key",
        "version__document__agent__key",
        "agent_key",
        "trace__agent__key",
    ):
        try:
            found = queryset.filter(**{lookup: SAMPLE_AGENT}).first()
        except Exception:  # noqa: BLE001 - the model has no such relation; try the next one
            continue
        if found is not None:
            return found
    return queryset.first()


def sample_pk(url_name: str):
    """A pk for `url_name`: an object of the model its name mentions ("api-grant-detail" →
    Grant; "audit-detail" → AuditRecord), preferably one of the sample agent."""
    from console.models import AccessLogEntry, AuditRecord

    explicit = {"audit": AuditRecord, "access-log": AccessLogEntry}
    for word, model in explicit.items():
        if word in url_name:
            obj = _in_sample_agent(model.objects.order_by("-id"))
            return obj.pk if obj else None
    words = [w for w in url_name.split("-") if w not in GENERIC_WORDS and len(w) > 2]
    candidates = [
        m
        for m in apps.get_models()
        if any(w == m._meta.model_name or w in m._meta.model_name for w in words)
    ]
    candidates.sort(key=lambda m: (m._meta.app_label == "auth", len(m._meta.model_name)))
    for model in candidates:
        obj = _in_sample_agent(model.objects.all())
        if obj is not None:
            return obj.pk
    return None


def sample_kwargs(endpoint: Endpoint) -> dict:
    from strategies.models import Version

    values = {}
    for kwarg in endpoint.kwargs:
        if kwarg in SIMPLE_SAMPLES:
            values[kwarg] = SIMPLE_SAMPLES[kwarg]
        elif kwarg == "number":
            version = (
                Version.objects.filter(document__agent__key=SAMPLE_AGENT, document__key="profile")
                .order_by("number")
                .first()
            )
            values[kwarg] = version.number if version else 1
        elif kwarg == "pk":
            values[kwarg] = sample_pk(endpoint.name or "")
        else:
            values[kwarg] = None
        if values[kwarg] is None:
            pytest.fail(
                f"The access matrix cannot fill URL kwarg {kwarg!r} of {endpoint.name!r} "
                f"({endpoint.route}): use one of the project's kwarg names, or teach "
                "sample_kwargs()/sample_pk() in tests/integration/test_access_matrix.py "
                "where to find a sample object."
            )
    return values


# --- the world the matrix runs in -----------------------------------------------------------------
@pytest.fixture
def matrix_world(demo_world, make_user):
    """Per standard role: `<role>_in` (granted on the sample agent) and `<role>_out` (granted
    only on the other agent); `admin_all` (admin on all agents); some audit and access rows."""
    from console import services
    from console.audit import access_record
    from console.models import Role
    from strategies.models import Agent

    users = {}
    for role in STANDARD_ROLES:
        users[f"{role}_in"] = make_user(f"m_{role}_in", **{role: SAMPLE_AGENT})
        users[f"{role}_out"] = make_user(f"m_{role}_out", **{role: OTHER_AGENT})
    users["admin_all"] = make_user("m_admin_all", admin=None)
    # Rows for the log pages and objects for pk urls: a profile edit (audit rows on the
    # sample agent), a grant on the sample agent, a console-wide role, a look at a trace.
    profile_edit(users["operator_in"], toggle=("user_context", "user_emails", True))
    services.grant_create(
        actor=users["admin_all"],
        role=Role.objects.get(name="support"),
        agent=Agent.objects.get(key=SAMPLE_AGENT),
        user=make_user("m_bystander"),
        reason="matrix: a grant on the sample agent",
    )
    services.role_create(actor=users["admin_all"], name="matrix-empty")
    access_record(
        actor=users["support_in"],
        action="trace.view",
        agent=SAMPLE_AGENT,
        target=("trace", "req-92", "req-92"),
    )
    return users


def _is_success(response) -> bool:
    if 200 <= response.status_code < 300:
        return True
    if 300 <= response.status_code < 400:
        location = response.headers.get("Location", "")
        return not location.startswith((reverse("login"), "/login"))
    return False


def _request(client, method: str, path: str):
    """One request with an empty body (JSON for the API and for PUT/PATCH/DELETE), rolled
    back afterwards so a write that succeeds does not change the world for the next case."""
    if method == "GET":
        kwargs = {}
    elif path.startswith("/api/") or method != "POST":
        kwargs = {"data": "{}", "content_type": "application/json"}
    else:
        kwargs = {"data": {}}
    with transaction.atomic():
        response = getattr(client, method.lower())(path, **kwargs)
        transaction.set_rollback(True)
    return response


def test_access_matrix__every_url_declares_its_rule__none_missing(db):
    missing = [
        f"{e.name or '(unnamed)'} → {e.route} (module {getattr(e.module, '__name__', '?')})"
        for e in endpoints()
        if e.name is None or rule_for(e) is None
    ]
    assert not missing, (
        "Every url must be named and declared in its url module's REQUIRED dict "
        "(console.policy: Capability.X | Everywhere(...) | PUBLIC | AUTHENTICATED):\n  "
        + "\n  ".join(missing)
    )


def test_access_matrix__every_url_role_scope_and_method__zero_unauthorized_successes(
    matrix_world, client
):
    from django.contrib.auth.models import AnonymousUser

    from strategies.models import Agent

    sample_agent = Agent.objects.get(key=SAMPLE_AGENT)
    principals = [("anonymous", AnonymousUser())] + list(matrix_world.items())
    violations, checked = [], 0
    covered = set()
    for endpoint in endpoints():
        rule = rule_for(endpoint)
        if rule is None:
            continue  # reported by the test above
        path = reverse(endpoint.name, kwargs=sample_kwargs(endpoint))
        agent = sample_agent if "agent" in endpoint.kwargs else None
        runtime = path.startswith(RUNTIME_PREFIX)
        # Which methods does the view accept? Ask as the all-agents admin: 405 means "not routed".
        methods = []
        for method in METHODS:
            client.force_login(matrix_world["admin_all"])  # again: a probe may log out
            if _request(client, method, path).status_code != 405:
                methods.append(method)
        for method in methods:
            for label, user in principals:
                if user.is_authenticated:
                    client.force_login(user)
                else:
                    client.logout()
                response = _request(client, method, path)
                checked += 1
                covered.add(endpoint.name)
                if response.status_code >= 500:
                    violations.append(
                        f"{method} {path} as {label}: server error {response.status_code}"
                    )
                elif runtime:
                    # Runtime API: bearer tokens only — a session or nothing is 401.
                    if response.status_code not in (401, 405):
                        violations.append(
                            f"{method} {path} as {label}: {response.status_code}, want 401 without a token"
                        )
                elif _is_success(response) and not rule_allows(user, rule, agent):
                    violations.append(
                        f"{method} {path} ({endpoint.name}, needs {rule}) as {label}: "
                        f"{response.status_code} — unauthorized success"
                    )
    assert not violations, f"{len(violations)} of {checked} requests:\n  " + "\n  ".join(violations)
    assert {"access-overview", "audit-list", "api-grant-list", "dashboard"} <= covered
