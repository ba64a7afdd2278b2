"""Demo releases (DEMO.md): what is live where and since when (the history of the last two
weeks, recorded with its times), one pending approval for prod, and a
runtime token for the sg-test demo runtime that stays the same across restarts (`demo_token`).
Idempotent; runs after console.demo.documents and console.demo.users, whose versions and users
it releases."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

from django.contrib.auth import get_user_model
from django.utils import timezone

from strategies.catalog.models import Environment
from strategies.documents.models import Document
from strategies.releases.models import ApprovalRequest, Release
from strategies.releases.services import approval_approve, release_publish
from strategies.runtime.auth import token_hash
from strategies.runtime.models import RuntimeToken
from strategies.runtime.tokens import runtime_token_create, runtime_token_revoke

AGENT = "assistant_professional"
STRATEGY = "after_sales_consultation"
DEMO_TOKEN_NAME = "demo runtime (sg-test)"


def demo_versions() -> tuple[dict, dict]:
    """(profile versions, strategy versions) of assistant_professional by number — the
    frozen versions console.demo.documents created (it runs before this loader)."""

    def frozen(key: str) -> dict:
        document = Document.objects.get(agent__key=AGENT, key=key)
        return {v.number: v for v in document.versions.filter(state="frozen")}

    return frozen(Document.PROFILE_KEY), frozen(STRATEGY)


# The release history of DEMO.md, oldest first: (hours ago, document, version, environment,
# reason). Every environment runs the Bank profile; v1 and then v2 of the strategy each went
# through sg-test, bank-uat and (approved by ops2) prod — so prod has a version to roll back
# to, as the README's tour has admin do; v3 has been live in sg-test since the day before the
# load, so its version-health page compares it with v2 over the same hours before.
PROFILE = Document.PROFILE_KEY
HISTORY = (
    (14 * 24, PROFILE, 1, "sg-test", "Bank profile for every environment."),
    (14 * 24, PROFILE, 1, "bank-uat", "Bank profile for every environment."),
    (14 * 24, PROFILE, 1, "prod", "Bank profile for every environment."),
    (13 * 24, STRATEGY, 1, "sg-test", "First consultation strategy."),
    (12 * 24, STRATEGY, 1, "bank-uat", "Promote v1 after sg-test."),
    (11 * 24, STRATEGY, 1, "prod", "Promote v1 after bank-uat."),
    (6 * 24, STRATEGY, 2, "sg-test", "Policy as optional context."),
    (5 * 24, STRATEGY, 2, "bank-uat", "Promote v2 after sg-test."),
    (4 * 24, STRATEGY, 2, "prod", "Promote v2 after bank-uat."),
    (26, STRATEGY, 3, "sg-test", "Policy required: test it first."),
)
APPROVAL_HOURS = 2  # how long prod's v2 request waited for ops2
PENDING_HOURS_AGO = 3  # when ops asked for v3 in prod (still waiting)


def _go_live(version, environment, ops, approver, reason: str, at) -> None:
    """Publish at `at` (and, in a protected environment, approve it APPROVAL_HOURS later)."""
    outcome = release_publish(
        version=version, environment=environment, actor=ops, reason=reason, at=at
    )
    if outcome.approval is not None:
        approval_approve(
            approval=outcome.approval,
            actor=approver,
            note="Checked in bank-uat.",
            at=at + timedelta(hours=APPROVAL_HOURS),
        )


def load(stdout=None) -> None:
    User = get_user_model()
    ops, ops2 = User.objects.get(username="ops"), User.objects.get(username="ops2")
    profile, strategy = demo_versions()
    versions = {PROFILE: profile, STRATEGY: strategy}
    envs = {e.key: e for e in Environment.objects.all()}
    strategy_doc = strategy[1].document
    now = timezone.now().replace(microsecond=0)

    # The history is recorded once, with its times: release events are append-only, so a
    # world loaded before keeps the history it has.
    if not Release.objects.filter(document=strategy_doc).exists():
        for hours_ago, document, number, env_key, reason in HISTORY:
            at = now - timedelta(hours=hours_ago)
            _go_live(versions[document][number], envs[env_key], ops, ops2, reason, at)
    if not ApprovalRequest.objects.filter(
        document=strategy_doc, environment=envs["prod"], version=strategy[3]
    ).exists():
        release_publish(
            version=strategy[3],
            environment=envs["prod"],
            actor=ops,
            reason="Policy required for after-sales answers; bank-uat's runtime follows.",
            at=now - timedelta(hours=PENDING_HOURS_AGO),
        )

    token, secret, reused = demo_token(envs["sg-test"], token_file=demo_token_file())
    if stdout is not None:
        stdout.write(demo_token_lines(token, secret, reused=reused))


def demo_token_file() -> Path | None:
    """Where the demo runtime token's secret is kept between starts: `scripts/run.py` sets
    CONSOLE_DEMO_TOKEN_FILE to `<data dir>/demo-runtime-token`. Unset (tests, a bare
    `manage.py load_demo`), the secret is kept nowhere."""
    value = os.environ.get("CONSOLE_DEMO_TOKEN_FILE", "").strip()
    return Path(value) if value else None


def _stored_secret(token_file: Path | None) -> str:
    if token_file is None:
        return ""
    try:
        secret = token_file.read_text().strip()
    except OSError:
        return ""
    if secret:
        token_file.chmod(0o600)
    return secret


def _store_secret(token_file: Path, secret: str) -> None:
    """Written 0600 through a rename, so a kill never leaves a half-written file."""
    token_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = token_file.with_name(f".{token_file.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(secret + "\n")
    os.replace(tmp, token_file)


def demo_token(environment, *, token_file: Path | None):
    """The demo runtime's token, stable across restarts: (token, secret or None, reused).

    The token whose secret is in `token_file` stays while it is active (a runtime wired to the
    demo keeps working after a restart). Without a usable secret a new token replaces the
    demo token(s) and its secret is stored; with no file at all an active token is kept (its
    secret was shown when it was made). Automated: recorded as the system, never a person."""
    return kept_token(
        DEMO_TOKEN_NAME,
        environment,
        capabilities=RuntimeToken.CAPABILITIES,
        token_file=token_file,
        keep_without_file=True,
    )


def demo_traffic_token_file(environment_key: str) -> Path | None:
    """Where the demo traffic's runtime in `environment_key` keeps its token's secret: beside
    the demo token file, so that a restart reuses the token instead of revoking it and
    making another (None when there is no demo token file)."""
    token_file = demo_token_file()
    return token_file.with_name(f"demo-traffic-token-{environment_key}") if token_file else None


def kept_token(
    name: str, environment, *, capabilities, token_file: Path | None, keep_without_file: bool
):
    """The active token called `name` whose secret is in `token_file`, else a new one whose
    secret is stored there: (token, secret or None, reused). Other active tokens of that name
    are revoked. `keep_without_file`: with no file at all keep the newest active token (its
    secret is then unknown: None) rather than replace it. Recorded as the system."""
    active = RuntimeToken.objects.filter(name=name, revoked_at__isnull=True)
    stored = _stored_secret(token_file)
    keep = active.filter(token_hash=token_hash(stored)).first() if stored else None
    if keep is None and token_file is None and keep_without_file:
        keep = active.order_by("-created_at").first()
        stored = ""
    if keep is not None:
        for other in active.exclude(pk=keep.pk):
            runtime_token_revoke(token=other, actor=None, reason=f"another {name} token is in use")
        return keep, stored or None, True
    for old in active:
        runtime_token_revoke(
            token=old, actor=None, reason=f"its secret is not in the {name} token file; replaced"
        )
    token, secret = runtime_token_create(
        name=name,
        environment=environment,
        capabilities=list(capabilities),
        all_agents=True,
        actor=None,
    )
    if token_file is not None:
        _store_secret(token_file, secret)
    return token, secret, False


def console_url() -> str:
    """The address `scripts/run.py` serves (HOST, PORT), as a local client reaches it."""
    host = os.environ.get("HOST", "").strip() or "127.0.0.1"
    if host in ("0.0.0.0", "::"):  # noqa: S104 - listening everywhere: talk to it locally
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{os.environ.get('PORT', '').strip() or '8000'}"


def demo_token_lines(token, secret: str | None, *, reused: bool) -> str:
    capabilities = ", ".join(token.capabilities)
    if secret is None:
        return (
            f"Demo runtime token for sg-test ({capabilities}): {token.prefix}…, made earlier; "
            "its secret was shown then."
        )
    token_file = demo_token_file()
    if token_file is None:
        kept = "shown once"
    elif reused:
        kept = f"the same as at the last start (kept in {token_file})"
    else:
        kept = f"new, kept in {token_file} for the next starts"
    return (
        f"Demo runtime token for sg-test ({capabilities}), {kept}:\n  {secret}\n"
        f"  try: curl -H 'Authorization: Bearer {secret}' "
        f"{console_url()}/api/v1/runtime/config/{AGENT}"
    )
