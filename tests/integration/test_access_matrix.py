"""THE access matrix: every URL of the URL conf × every standard role (granted on the
sample agent, or only on another agent) × anonymous, for GET and each write method the
view accepts — zero unauthorized successes. Every operator API URL (/api/v1/ but the
runtime API) is also requested with each principal's personal API token (scope: all their
grants), with a narrowed token (view_config on the sample agent, of the all-agents admin),
and with a runtime token, which the operator API refuses (401).

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
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from console.kernel.policy import PUBLIC, STANDARD_ROLES, rule_allows
from tests.factories import OTHER_AGENT, SAMPLE_AGENT, profile_edit
from tests.rollback import rolled_back

SKIPPED_PREFIXES = ("django-admin/", "static/", "media/")
RUNTIME_PREFIX = "/api/v1/runtime/"
OPERATOR_API_PREFIX = "/api/v1/"
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
    from importlib import import_module

    from django.conf import settings

    root = settings.ROOT_URLCONF
    root = import_module(root) if isinstance(root, str) else root
    return list(walk(get_resolver().url_patterns, "", root))


def rule_for(endpoint: Endpoint):
    return getattr(endpoint.module, "REQUIRED", {}).get(endpoint.name)


# --- sample values for URL kwargs, by kwarg name ------------------------------------------------
# The project fixes kwarg names (agent, document, number, environment, request_id, pk). Values
# point into the sample agent, so "in scope" and "out of scope" mean something.
SIMPLE_SAMPLES = {
    "agent": SAMPLE_AGENT,
    "environment": "sg-test",
    "request_id": "req-92",
    "kind": "escalated",  # an outcome kind every demo environment declares
    "provider": "bank",  # an identity provider's key (none is configured: 404 for everyone)
    "rule": "card",  # a redaction rule (the demo has none: 404 for everyone allowed in)
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
    from console.kernel.models import AccessLogEntry, AuditRecord

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
        if obj is None and model._meta.label_lower in SAMPLE_FACTORIES:
            obj = SAMPLE_FACTORIES[model._meta.label_lower](model)
        if obj is not None:
            return obj.pk
    return None


def _sample_webhook(model):
    from strategies.catalog.models import Environment

    return model.objects.create(
        environment=Environment.objects.get(key="sg-test"),
        url="http://127.0.0.1:9/hook",
        secret="matrix-sample-secret",
    )


def _sample_personal_token(model):
    from django.contrib.auth import get_user_model

    from console.accounts.personal_tokens import personal_token_create

    user = get_user_model().objects.filter(grants__isnull=False).order_by("pk").first()
    token, _ = personal_token_create(
        user=user, name="matrix sample", capabilities=["view_config"], all_agents=True
    )
    return token


def _sample_preview(model):
    """A complete impact preview of the sample strategy's newest frozen version (v3 in the
    demo world, v1 in a smaller one) against sg-test, over the last 7 days (so req-92 is in
    its window for the side-by-side url)."""
    from datetime import timedelta

    from django.utils import timezone

    from strategies.catalog.models import Environment
    from strategies.documents.models import Version

    version = (
        Version.objects.filter(
            document__agent__key=SAMPLE_AGENT,
            document__key="after_sales_consultation",
            state=Version.State.FROZEN,
        )
        .order_by("-number")
        .first()
    )
    now = timezone.now()
    return model.objects.create(
        agent=version.document.agent,
        environment=Environment.objects.get(key="sg-test"),
        document=version.document,
        version=version,
        version_number=version.number,
        content_hash=version.content_hash,
        body=version.body,
        live_version_number=version.number,
        live_content_hash=version.content_hash,
        window_start=now - timedelta(days=7),
        window_end=now + timedelta(minutes=1),
        engine="matrix",
        state=model.State.COMPLETE,
        finished_at=now,
        report={"previewed": 0, "withheld": False},
    )


def _sample_rollout(model):
    """A stopped staged rollout of the sample strategy in sg-test (v1 over what is live)."""
    from django.utils import timezone

    from strategies.releases.models import Release

    live = Release.objects.get(
        document__agent__key=SAMPLE_AGENT,
        document__key="after_sales_consultation",
        environment__key="sg-test",
    )
    plan = [{"share": 1.0, "bake_seconds": 600}]
    rollout = model.objects.create(
        key="matrix-sample",
        document=live.document,
        environment=live.environment,
        version=live.document.versions.get(number=1),
        control_version=live.version,
        plan=plan,
        plan_hash="matrix",
        state=model.State.STOPPED,
        started_by="matrix",
        ended_at=timezone.now(),
    )
    model.objects.filter(pk=rollout.pk).update(key=f"ro-{rollout.pk}")
    return rollout


def _sample_group_mapping(model):
    from console.kernel.models import Role

    return model.objects.create(
        provider="bank",
        group="matrix",
        role=Role.objects.get(name="viewer"),
        role_name="viewer",
        all_agents=True,
    )


def _sample_scim_token(model):
    return model.objects.create(
        provider="bank", name="matrix", prefix="scim_x", token_hash="m" * 64
    )


# Objects the demo world does not have, created on demand for pk urls (by model label).
def _sample_break_glass_account(model):
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user("matrix-break-glass", password="matrix-pass-1")
    return model.objects.create(user=user, reason="matrix sample")


def _sample_siem_destination(model):
    """A destination row alone (no cursors, so "siem" urls resolve to it, not to a cursor)."""
    return model.objects.create(name="matrix sample", protocol="syslog", url="tcp://192.0.2.1:6514")


def _sample_schedule(model):
    """A publish of the sample strategy's newest version to sg-test, scheduled a day ahead."""
    from datetime import timedelta

    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from strategies.catalog.models import Environment
    from strategies.documents.models import Version

    version = Version.objects.filter(document__agent__key=SAMPLE_AGENT).order_by("-id").first()
    return model.objects.create(
        environment=Environment.objects.get(key="sg-test"),
        document=version.document,
        version=version,
        run_at=timezone.now() + timedelta(days=1),
        requested_by=get_user_model().objects.order_by("pk").first(),
    )


def _sample_freeze_window(model):
    from datetime import timedelta

    from django.utils import timezone

    from strategies.catalog.models import Environment

    return model.objects.create(
        environment=Environment.objects.get(key="sg-test"),
        starts_at=timezone.now() + timedelta(days=30),
        ends_at=timezone.now() + timedelta(days=31),
        reason="matrix sample",
        created_by="matrix",
    )


def _sample_alert_rule(model):
    from strategies.catalog.models import Agent, Environment

    return model.objects.create(
        agent=Agent.objects.get(key=SAMPLE_AGENT),
        environment=Environment.objects.get(key="sg-test"),
        name="matrix sample",
        metric="missing_required_data",
        comparison="above",
        alert_threshold=0.02,
    )


def _sample_alert_silence(model):
    from datetime import timedelta

    from django.utils import timezone

    from strategies.catalog.models import Agent

    return model.objects.create(
        agent=Agent.objects.get(key=SAMPLE_AGENT),
        reason="matrix sample",
        ends_at=timezone.now() + timedelta(days=1),
    )


def _sample_regression_set(model):
    """A regression set of the sample strategy (issue 35)."""
    from strategies.documents.models import Document

    document = Document.objects.filter(agent__key=SAMPLE_AGENT, kind="strategy").first()
    found, _ = model.objects.get_or_create(
        agent=document.agent,
        name="matrix",
        defaults={"document": document, "keep_reason": "matrix sample"},
    )
    return found


def _sample_regression_member(model):
    """A member of a sample regression set (its snapshot need not replay here)."""
    from django.apps import apps as django_apps
    from django.utils import timezone

    regression_set = _sample_regression_set(django_apps.get_model("regressions", "RegressionSet"))
    return model.objects.create(
        set=regression_set,
        request_id="req-92",
        environment_key="sg-test",
        occurred_at=timezone.now(),
        strategy_version=1,
        snapshot={},
        expectations=[{"kind": "status_in", "statuses": ["ready"]}],
        note="matrix",
        expires_at=timezone.now(),
    )


SAMPLE_FACTORIES = {
    "strategies.scheduledgolive": _sample_schedule,
    "strategies.freezewindow": _sample_freeze_window,
    "regressions.regressionset": _sample_regression_set,
    "regressions.member": _sample_regression_member,
    "console.breakglassaccount": _sample_break_glass_account,
    "strategies.rollout": _sample_rollout,
    "strategies.webhook": _sample_webhook,
    "console.personaltoken": _sample_personal_token,
    "previews.preview": _sample_preview,
    "console.groupmapping": _sample_group_mapping,
    "console.siemdestination": _sample_siem_destination,
    "console.scimtoken": _sample_scim_token,
    "traces.erasure": lambda model: model.objects.create(principal_digest="0" * 64, reference="m"),
    "alerts.alertrule": _sample_alert_rule,
    "alerts.silence": _sample_alert_silence,
}


def sample_document(url_name: str) -> str:
    """The profile, or the demo strategy for urls about strategies (when it exists)."""
    from strategies.documents.models import Document

    if (
        "strateg" in url_name
        and Document.objects.filter(
            agent__key=SAMPLE_AGENT, key="after_sales_consultation"
        ).exists()
    ):
        return "after_sales_consultation"
    return "profile"


def sample_kwargs(endpoint: Endpoint) -> dict:
    from strategies.documents.models import Version

    values = {}
    name = endpoint.name or ""
    for kwarg in endpoint.kwargs:
        if kwarg in SIMPLE_SAMPLES:
            values[kwarg] = SIMPLE_SAMPLES[kwarg]
        elif kwarg == "document":
            values[kwarg] = sample_document(name)
        elif kwarg == "number":
            version = (
                Version.objects.filter(
                    document__agent__key=SAMPLE_AGENT, document__key=sample_document(name)
                )
                .order_by("number")
                .first()
            )
            values[kwarg] = version.number if version else 1
        elif kwarg == "pk":
            values[kwarg] = sample_pk(name)
        elif kwarg == "key" and "rollout" in name:  # a rollout's public id: ro-<pk>
            pk = sample_pk(name)
            values[kwarg] = f"ro-{pk}" if pk is not None else None
        else:
            values[kwarg] = None
        if values[kwarg] is None:
            pytest.fail(
                f"The access matrix cannot fill URL kwarg {kwarg!r} of {endpoint.name!r} "
                f"({endpoint.route}): use one of the project's kwarg names; for pk, name the "
                "url after its model and make sure the demo world has one of them (or add a "
                "creator to SAMPLE_FACTORIES in tests/integration/test_access_matrix.py)."
            )
    return values


# --- the world the matrix runs in -----------------------------------------------------------------
@pytest.fixture
def matrix_world(demo_world, make_user):
    """Per standard role: `<role>_in` (granted on the sample agent) and `<role>_out` (granted
    only on the other agent); `admin_all` (admin on all agents); some audit and access rows."""
    from console.access import services
    from console.kernel.audit import AccessAction, access_record
    from console.kernel.models import Role
    from strategies.catalog.models import Agent

    users = {}
    for role in STANDARD_ROLES:
        users[f"{role}_in"] = make_user(f"m_{role}_in", **{role: SAMPLE_AGENT})
        users[f"{role}_out"] = make_user(f"m_{role}_out", **{role: OTHER_AGENT})
    users["admin_all"] = make_user("m_admin_all", admin=None)
    # Rows for the log pages and objects for pk urls: a profile edit (audit rows on the
    # sample agent), a grant on the sample agent, a console-wide role, a look at a trace.
    profile_edit(users["operator_in"], toggle=("user_context", "communication_style", False))
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
        action=AccessAction.TRACE_VIEW,
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
    with rolled_back():
        response = getattr(client, method.lower())(path, **kwargs)
    return response


def _valid_rule(rule) -> bool:
    from console.kernel.policy import AUTHENTICATED, PUBLIC, Capability, Everywhere

    if isinstance(rule, dict):
        return bool(rule) and all(_valid_rule(r) for r in rule.values())
    return isinstance(rule, Capability | Everywhere) or rule in (PUBLIC, AUTHENTICATED)


def test_access_matrix__every_rule__is_a_known_kind(db):
    bad = [
        f"{e.name}: {rule_for(e)!r}"
        for e in endpoints()
        if e.name and not _valid_rule(rule_for(e) or PUBLIC)
    ]
    assert not bad, (
        "REQUIRED values must be Capability, Everywhere, PUBLIC, AUTHENTICATED or a dict of them per method:\n  "
        + "\n  ".join(bad)
    )


def test_access_matrix__every_url_declares_its_rule__none_missing(db):
    missing = [
        f"{e.name or '(unnamed)'} → {e.route} (module {getattr(e.module, '__name__', '?')})"
        for e in endpoints()
        if e.name is None or rule_for(e) is None
    ]
    assert not missing, (
        "Every url must be named and declared in its url module's REQUIRED dict "
        "(console.kernel.policy: Capability.X | Everywhere(...) | PUBLIC | AUTHENTICATED):\n  "
        + "\n  ".join(missing)
    )


class Principal:
    """A test client that stays signed in as one user (or anonymous) across requests."""

    def __init__(self, label: str, user):
        from django.conf import settings
        from django.test import Client

        self.label, self.user, self.client = label, user, Client()
        self._cookie = settings.SESSION_COOKIE_NAME
        self.sign_in()

    def sign_in(self):
        if self.user.is_authenticated:
            self.client.force_login(self.user)

    def request(self, method: str, path: str):
        response = _request(self.client, method, path)
        if self.user.is_authenticated and not self.client.cookies.get(self._cookie, None).value:
            self.sign_in()  # the request logged us out (logout url): sign in again
        return response


class TokenPrincipal:
    """A test client sending `Authorization: Bearer <secret>` and no session. `user` is the
    token's user carrying the token, as the authentication class hands it to the policy,
    so `rule_allows` judges what the token may do (the user's grants ∩ its scope)."""

    def __init__(self, label: str, user, secret: str, token=None):
        from django.test import Client

        from console.kernel.audit import PERSONAL_TOKEN_ATTR

        self.label, self.user = label, user
        if token is not None:
            self.user = type(user).objects.get(pk=user.pk)
            setattr(self.user, PERSONAL_TOKEN_ATTR, token)
        self.client = Client(HTTP_AUTHORIZATION=f"Bearer {secret}")

    def request(self, method: str, path: str):
        return _request(self.client, method, path)


def token_principals(users: dict) -> tuple[list[TokenPrincipal], TokenPrincipal]:
    """A personal token per principal with all their grants as its scope; the all-agents
    admin's narrowed token (view_config on the sample agent); a runtime token."""
    from console.accounts.personal_tokens import capabilities_offered, personal_token_create
    from strategies.catalog.models import Environment
    from tests.factories import runtime_token

    def token_of(label, user, **scope):
        scope.setdefault("all_agents", not scope.get("agents"))
        token, secret = personal_token_create(user=user, name=f"matrix {label}", **scope)
        return TokenPrincipal(f"{label}+token", user, secret, token)

    principals = [
        token_of(label, user, capabilities=[c.value for c in capabilities_offered(user)])
        for label, user in users.items()
    ]
    principals.append(
        token_of(
            "admin_all+narrow",
            users["admin_all"],
            capabilities=["view_config"],
            agents=[SAMPLE_AGENT],
        )
    )
    # A token whose only agent is gone (deleted in a race with the token's creation, or in
    # the days when a delete did not look at tokens): it covers no agent, never every agent.
    principals.append(
        token_of(
            "admin_all+deleted-agent",
            users["admin_all"],
            capabilities=[c.value for c in capabilities_offered(users["admin_all"])],
            agents=[_doomed_agent(users["admin_all"]).key],
        )
    )
    _agent_gone(DOOMED_AGENT)
    runtime = TokenPrincipal(
        "runtime-token", None, runtime_token(Environment.objects.get(key="sg-test"))
    )
    return principals, runtime


DOOMED_AGENT = "sbx-1"


def _doomed_agent(admin):
    from strategies.catalog.models import Agent
    from strategies.catalog.services import agent_create

    return Agent.objects.filter(key=DOOMED_AGENT).first() or agent_create(
        key=DOOMED_AGENT, actor=admin
    )


def _agent_gone(key: str) -> None:
    """Delete the agent as agent_delete does once its checks passed (documents, then the row
    and, by CASCADE, the tokens' scope rows): what a token made in a race with it is left."""
    from strategies.catalog.dependents import agent_documents
    from strategies.catalog.models import Agent

    agent = Agent.objects.get(key=key)
    agent_documents().delete_with_agent(agent=agent)
    agent.delete()


def run_matrix(users: dict, only: set[str] | None = None, *, tokens: bool = True):
    """Request every endpoint (or those named in `only`) with every method it accepts as
    every principal (and, on the operator API, every token). Returns (violations, requests
    made, url names covered)."""
    from django.contrib.auth.models import AnonymousUser

    from strategies.catalog.models import Agent

    sample_agent = Agent.objects.get(key=SAMPLE_AGENT)
    prober = Principal("admin_all", users["admin_all"])
    principals = [Principal("anonymous", AnonymousUser())] + [
        prober if label == "admin_all" else Principal(label, user) for label, user in users.items()
    ]
    bearers, runtime_bearer = token_principals(users) if tokens else ([], None)
    violations, checked, covered = [], 0, set()
    for endpoint in endpoints():
        rule = rule_for(endpoint)
        if rule is None or (only is not None and endpoint.name not in only):
            continue  # undeclared: reported by test_access_matrix__every_url_declares_its_rule
        path = reverse(endpoint.name, kwargs=sample_kwargs(endpoint))
        agent = sample_agent if "agent" in endpoint.kwargs else None
        runtime = path.startswith(RUNTIME_PREFIX)
        # The methods the view accepts: the all-agents admin gets 405 for the others.
        methods = [m for m in METHODS if prober.request(m, path).status_code != 405]
        operator_api = path.startswith(OPERATOR_API_PREFIX) and not runtime
        for method in methods:
            for principal in principals + (bearers if operator_api else []):
                response = principal.request(method, path)
                checked += 1
                covered.add(endpoint.name)
                where = f"{method} {path} as {principal.label}"
                if response.status_code >= 500:
                    violations.append(f"{where}: server error {response.status_code}")
                elif runtime:
                    # Runtime API: bearer tokens only — a session or nothing is 401.
                    if response.status_code not in (401, 405):
                        violations.append(f"{where}: {response.status_code}, want 401 (no token)")
                elif _is_success(response) and not rule_allows(principal.user, rule, agent, method):
                    violations.append(
                        f"{where} ({endpoint.name} needs {rule}): {response.status_code}, "
                        "an unauthorized success"
                    )
            if operator_api and runtime_bearer is not None:
                response = runtime_bearer.request(method, path)
                checked += 1
                if response.status_code != 401:
                    violations.append(
                        f"{method} {path} with a runtime token: {response.status_code}, want 401"
                    )
    return violations, checked, covered


def test_access_matrix__every_url_role_scope_and_method__zero_unauthorized_successes(
    matrix_world,
):
    violations, checked, covered = run_matrix(matrix_world)
    assert not violations, f"{len(violations)} of {checked} requests:\n  " + "\n  ".join(violations)
    assert {"access-overview", "audit-list", "api-grant-list", "dashboard"} <= covered
    assert {"api-personaltoken-list", "api-audit-export", "account"} <= covered


def test_access_matrix__narrowed_token__rule_allows_only_its_scope(matrix_world):
    """The narrowed token of the all-agents admin: view_config on the sample agent, nothing
    else — the matrix judges its requests by that, and the API answers accordingly."""
    from console.kernel.policy import Capability, Everywhere
    from strategies.catalog.models import Agent

    bearers, runtime = token_principals(matrix_world)
    narrow = next(p for p in bearers if p.label == "admin_all+narrow+token")
    sample, other = Agent.objects.get(key=SAMPLE_AGENT), Agent.objects.get(key=OTHER_AGENT)
    admin = matrix_world["admin_all"]
    assert rule_allows(admin, Capability.VIEW_AUDIT) and rule_allows(
        admin, Capability.VIEW_CONFIG, other
    )
    assert rule_allows(narrow.user, Capability.VIEW_CONFIG, sample)
    assert not rule_allows(narrow.user, Capability.VIEW_CONFIG, other)
    assert not rule_allows(narrow.user, Capability.EDIT_DRAFTS, sample)
    assert not rule_allows(narrow.user, Capability.VIEW_AUDIT)
    assert not rule_allows(narrow.user, Everywhere(Capability.MANAGE_GRANTS))
    documents = reverse("api-document-list", kwargs={"agent": SAMPLE_AGENT})
    assert narrow.request("GET", documents).status_code == 200
    hidden = reverse("api-document-list", kwargs={"agent": OTHER_AGENT})
    assert narrow.request("GET", hidden).status_code == 404  # out of scope: as if absent
    assert narrow.request("GET", reverse("api-audit-list")).status_code == 403
    agents = narrow.request("GET", reverse("api-agent-list")).json()
    keys = {a["key"] for a in agents.get("results", agents)}
    assert keys == {SAMPLE_AGENT}
    assert runtime.request("GET", reverse("api-agent-list")).status_code == 401


# --- tokens of a deleted agent: no agent, never every agent ----------------------------------------
def test_access_matrix__agent_delete__refused_while_tokens_name_it(matrix_world):
    """Deleting an agent that active tokens are scoped to is 409 in_use, naming each token
    (personal ones with their owner): revoking them is a person's decision, and a deleted
    scope must never read as "every agent"."""
    from django.test import Client

    from console.accounts.personal_tokens import personal_token_create
    from strategies.catalog.models import Agent
    from strategies.runtime.tokens import runtime_token_create

    admin = matrix_world["admin_all"]
    agent = _doomed_agent(admin)
    personal_token_create(
        user=admin,
        name="sbx-ci",
        capabilities=["view_config"],
        all_agents=False,
        agents=[agent.key],
    )
    from strategies.catalog.models import Environment

    runtime_token_create(
        name="sbx runner",
        environment=Environment.objects.get(key="sg-test"),
        capabilities=["config:read"],
        all_agents=False,
        agents=[agent],
    )
    client = Client()
    client.force_login(admin)
    response = client.delete(reverse("api-agent-detail", kwargs={"agent": agent.key}))
    assert response.status_code == 409, response.content
    error = response.json()["error"]
    assert error["code"] == "in_use"
    assert {d["code"] for d in error["details"]} == {"has_runtime_tokens", "has_personal_tokens"}
    assert "“sbx runner”" in error["message"] and "m_admin_all’s “sbx-ci”" in error["message"]
    assert Agent.objects.filter(key=agent.key).exists()


def test_access_matrix__personal_token_of_a_deleted_agent__covers_no_agent(matrix_world):
    """The token of sbx-1, after sbx-1 is gone: no agent listed, another agent's documents
    404, the audit export 403 — where it used to widen to every agent the admin sees."""
    from console.kernel.policy import Capability, Everywhere

    bearers, _ = token_principals(matrix_world)
    orphan = next(p for p in bearers if p.label == "admin_all+deleted-agent+token")
    assert orphan.request("GET", reverse("api-agent-list")).status_code == 200
    agents = orphan.request("GET", reverse("api-agent-list")).json()
    assert agents.get("results", agents) == []
    documents = reverse("api-document-list", kwargs={"agent": SAMPLE_AGENT})
    assert orphan.request("GET", documents).status_code == 404
    assert orphan.request("GET", reverse("api-audit-export")).status_code == 403
    assert not rule_allows(orphan.user, Capability.VIEW_CONFIG)
    assert not rule_allows(orphan.user, Everywhere(Capability.VIEW_AUDIT))


def test_access_matrix__runtime_token_of_a_deleted_agent__covers_no_agent(matrix_world):
    """A runtime token of sbx-1, after sbx-1 is gone — looked up afresh, as once its cached
    identity expires: every agent's config 404, traces refused, the manifest 403."""
    from django.test import Client

    from strategies.catalog.models import Agent, Environment, Manifest
    from strategies.runtime.auth import cached_identity
    from tests.factories import legacy_runtime_token, manifest_body, post_batch, trace_payload

    secret = legacy_runtime_token(  # manifest:write: made before that scope was refused
        Environment.objects.get(key="sg-test"),
        capabilities=["config:read", "manifest:write", "traces:write"],
        agents=[_doomed_agent(matrix_world["admin_all"])],
    )
    _agent_gone(DOOMED_AGENT)
    runtime = Client(HTTP_AUTHORIZATION=f"Bearer {secret}")
    for key in Agent.objects.values_list("key", flat=True):
        response = runtime.get(reverse("runtime-config", kwargs={"agent": key}))
        assert response.status_code == 404, (key, response.status_code)
    stored = post_batch(runtime, secret, [trace_payload("req-orphan")]).json()
    assert stored["accepted"] == 0 and stored["rejected"][0]["errors"][0]["code"] == "unknown_agent"
    manifests = Manifest.objects.count()
    response = runtime.put(
        reverse("runtime-manifest"), data=manifest_body(), content_type="application/json"
    )
    assert response.status_code == 403 and Manifest.objects.count() == manifests
    # The identity cached in Redis (what the process mirror and the WSGI dispatcher hold)
    # says so too: read back from the cache, it covers no agent.
    cached = cached_identity(secret)
    assert cached is not None and not cached.all_agents and cached.agent_keys == frozenset()
    assert not any(cached.covers_agent(k) for k in Agent.objects.values_list("key", flat=True))


# --- the matrix catches what it should -------------------------------------------------------------
def _leaky_view(request, agent):
    """A page someone forgot to guard: no `requires`, no policy check."""
    from django.http import HttpResponse

    return HttpResponse(f"secrets of {agent}")


def _urlconf_with(extra_patterns, extra_required):
    from django.urls import include, path

    import console.urls

    extra = ModuleType("matrix_extra_urls")
    extra.urlpatterns = extra_patterns
    extra.REQUIRED = extra_required
    root = ModuleType("matrix_root_urls")
    root.urlpatterns = [*console.urls.urlpatterns, path("", include(extra))]
    root.REQUIRED = console.urls.REQUIRED
    return root


def test_access_matrix__unguarded_agent_page__reported_for_out_of_scope_users(
    matrix_world, settings
):
    from django.urls import clear_url_caches, path

    from console.kernel.policy import Capability

    settings.ROOT_URLCONF = _urlconf_with(
        [path("leaky/<str:agent>/", _leaky_view, name="leaky")], {"leaky": Capability.VIEW_AUDIT}
    )
    clear_url_caches()
    try:
        violations, _, covered = run_matrix(matrix_world, only={"leaky"}, tokens=False)
    finally:
        clear_url_caches()
    assert covered == {"leaky"}
    leaked_to = {v.split(" as ")[1].split(" ")[0] for v in violations}
    assert {"viewer_in", "operator_in", "admin_out", "support_out"} <= leaked_to
    assert "admin_in" not in leaked_to and "anonymous" not in leaked_to


def test_access_matrix__url_without_required_entry__reported(db, settings):
    from django.urls import clear_url_caches, path

    settings.ROOT_URLCONF = _urlconf_with([path("forgot/", _leaky_view, name="forgot")], {})
    clear_url_caches()
    try:
        undeclared = [e.name for e in endpoints() if rule_for(e) is None]
    finally:
        clear_url_caches()
    assert undeclared == ["forgot"]


# --- grants made by delegates: never above the granter's own --------------------------------------
def _held(user, agent_key: str | None) -> set[str]:
    """What the user holds there, read from their grant rows (not through the policy): on an
    agent its grants and the all-agent ones; on all agents the all-agent ones only."""
    from django.db.models import Q

    from console.kernel.models import Grant

    where = Q(agent__isnull=True)
    if agent_key is not None:
        where |= Q(agent__key=agent_key)
    held: set[str] = set()
    for caps in (
        Grant.objects.filter(user=user).filter(where).values_list("role__capabilities", flat=True)
    ):
        held |= set(caps)
    return held


def _grants(user, role, agent_key: str | None):
    from console.kernel.models import Grant

    if agent_key is None:
        return Grant.objects.filter(user=user, role=role, agent__isnull=True)
    return Grant.objects.filter(user=user, role=role, agent__key=agent_key)


def _grant_attempt(client, channel: str, role, agent_key: str | None, whom):
    """POST one grant through the API or the grant page (confirmed), rolled back. Returns
    (the response, whether the grant existed before, whether it exists after)."""
    reason = "matrix: a delegate's grant"
    existed = _grants(whom, role, agent_key).exists()
    with rolled_back():
        if channel == "api":
            body = {"role": role.name, "agent": agent_key, "user": whom.username, "reason": reason}
            response = client.post(reverse("api-grant-list"), body, content_type="application/json")
        else:
            body = {
                "username": whom.username,
                "role": role.pk,
                "agent": agent_key or "*",
                "reason": reason,
                "confirm": "1",
            }
            response = client.post(reverse("grant-create"), body)
        exists = _grants(whom, role, agent_key).exists()
    return response, existed, exists


def test_access_matrix__grants_by_every_principal__only_within_their_own_and_never_to_self(
    matrix_world, make_user
):
    """Every principal (the matrix's, plus a delegate of the sample agent and one of all
    agents: view_config + manage_grants) grants every role, on the sample agent and on all
    agents, to someone else and to themselves, through the API and the grant page. A grant
    may succeed only with manage_grants and every capability of the role there, never to
    oneself; and each one that may, does."""
    from console.kernel.models import Role

    users = {
        **matrix_world,
        "delegate_in": make_user("m_delegate_in", delegate=SAMPLE_AGENT),
        "delegate_all": make_user("m_delegate_all", delegate=None),
    }
    recipient = make_user("m_recipient")
    roles = list(Role.objects.filter(name__in=[*STANDARD_ROLES, "delegate"]))
    problems, allowed = [], 0
    for label, user in users.items():
        principal = Principal(label, user)
        for role in roles:
            for scope in (SAMPLE_AGENT, None):
                held = _held(user, scope)
                for whom in (recipient, user):
                    may = (
                        "manage_grants" in held
                        and set(role.capabilities) <= held
                        and whom.pk != user.pk
                    )
                    allowed += may
                    for channel in ("api", "page"):
                        response, existed, exists = _grant_attempt(
                            principal.client, channel, role, scope, whom
                        )
                        where = (
                            f"{channel}: {label} grants {role.name} on {scope or 'all agents'} "
                            f"to {'themselves' if whom is user else 'someone else'}"
                        )
                        if response.status_code >= 500:
                            problems.append(f"{where}: server error {response.status_code}")
                        elif exists and not existed and not may:
                            problems.append(
                                f"{where}: granted ({response.status_code}), above their own"
                            )
                        elif may and not (_is_success(response) and exists):
                            problems.append(
                                f"{where}: refused ({response.status_code}), within their own"
                            )
    assert not problems, f"{len(problems)} problems:\n  " + "\n  ".join(problems)
    assert allowed >= 10  # the sweep exercised grants that must succeed, not only refusals
