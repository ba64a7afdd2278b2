"""Demo releases (DEMO.md): what is live where, one pending approval for prod, and a
runtime token for the sg-test demo runtime. Idempotent; runs after console.demo.documents and
console.demo.users, whose versions and users it releases."""

from __future__ import annotations

from django.contrib.auth import get_user_model

from strategies.catalog.models import Environment
from strategies.documents.models import Document
from strategies.releases.models import ApprovalRequest, Release
from strategies.releases.services import approval_approve, release_publish
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


def _go_live(version, environment, ops, approver, reason: str) -> None:
    """Publish (and, in a protected environment, approve) unless already live there."""

    if Release.objects.filter(
        document=version.document, environment=environment, version=version
    ).exists():
        return
    outcome = release_publish(version=version, environment=environment, actor=ops, reason=reason)
    if outcome.approval is not None:
        approval_approve(approval=outcome.approval, actor=approver, note="Checked in bank-uat.")


def load(stdout=None) -> None:
    User = get_user_model()
    ops, ops2 = User.objects.get(username="ops"), User.objects.get(username="ops2")
    admin = User.objects.get(username="admin")
    profile, strategy = demo_versions()
    envs = {e.key: e for e in Environment.objects.all()}
    strategy_doc = strategy[1].document

    if not Release.objects.filter(document=strategy_doc).exists():
        for key in ("sg-test", "bank-uat", "prod"):
            _go_live(profile[1], envs[key], ops, ops2, "Bank configuration of document 000.")
        _go_live(strategy[1], envs["sg-test"], ops, ops2, "First consultation strategy.")
        _go_live(strategy[2], envs["sg-test"], ops, ops2, "Policy as optional context.")
        _go_live(strategy[3], envs["sg-test"], ops, ops2, "Document 003's strategy for testing.")
        _go_live(strategy[2], envs["bank-uat"], ops, ops2, "Promote v2 after sg-test.")
        _go_live(strategy[2], envs["prod"], ops, ops2, "Promote v2 after bank-uat.")
    if not ApprovalRequest.objects.filter(
        document=strategy_doc, environment=envs["prod"], version=strategy[3]
    ).exists():
        release_publish(
            version=strategy[3],
            environment=envs["prod"],
            actor=ops,
            reason="Document 003's strategy; bank-uat's runtime is catching up on the handler.",
        )

    # A fresh token for the demo runtime on every run; the previous one stops working.

    for old in RuntimeToken.objects.filter(name=DEMO_TOKEN_NAME, revoked_at__isnull=True):
        runtime_token_revoke(token=old, actor=admin)
    _, secret = runtime_token_create(
        name=DEMO_TOKEN_NAME,
        environment=envs["sg-test"],
        capabilities=list(RuntimeToken.CAPABILITIES),
        actor=admin,
    )
    if stdout is not None:
        stdout.write(
            "Demo runtime token for sg-test (config:read, manifest:write, traces:write), "
            f"shown once:\n  {secret}\n"
            "  try: curl -H 'Authorization: Bearer <token>' "
            f"http://127.0.0.1:8000/api/v1/runtime/config/{AGENT}"
        )
