"""The saved impact preview on the publish page and in the approval request (issue 20): a
sentence of impact, the fidelity and a link to the report, or a button to run one; where the
environment requires a preview, what is missing."""

from __future__ import annotations

import html
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from strategies.catalog.models import Environment
from strategies.documents import services as documents
from strategies.releases.models import ApprovalRequest
from strategies.releases.services import release_publish
from tests.integration.test_previews import AGENT, STRATEGY, _draft, _run
from traces.previews import services

pytestmark = pytest.mark.django_db


@pytest.fixture
def ops(demo_world):
    return get_user_model().objects.get(username="ops")


def _publish_page(client, version, environment="sg-test") -> str:
    url = reverse("release-publish", args=[AGENT, STRATEGY, environment])
    response = client.get(url, {"version": version.number})
    assert response.status_code == 200
    return html.unescape(response.content.decode())


def test_publish_page__no_preview_of_the_version__offers_preview_impact(ops, client):
    draft = _draft(max_input_tokens=4000)
    client.force_login(ops)

    page = _publish_page(client, draft)

    assert 'id="impact-none"' in page
    run = reverse("preview-new", args=[AGENT, STRATEGY])
    assert f'href="{run}?version={draft.number}&environment=sg-test" id="impact-run"' in page


def test_publish_page__saved_preview__impact_sentence_fidelity_and_report_link(ops, client):
    draft = _draft(max_input_tokens=4000)
    preview, _ = services.preview_request(
        actor=ops, version=draft, environment=Environment.objects.get(key="sg-test")
    )
    report = _run(preview).report
    becoming = sum(
        row["budget_exceeded"]["count"]
        for old, row in report["status_matrix"].items()
        if old != "budget_exceeded" and "budget_exceeded" in row
    )
    client.force_login(ops)

    page = _publish_page(client, draft)

    assert (
        f"Impact on {report['previewed']:,} traces of sg-test, last 7 days: "
        f"{becoming:,} become budget exceeded" in page
    )
    # Checked on every trace with replay fields: v1's and v2's too, previewable or not.
    checked = report["fidelity"]["checked"]
    assert checked >= report["previewed"]
    assert (
        f"The replay reproduced what the runtime decided on {checked:,} of {checked:,} traces"
        in page
    )
    assert "Fidelity 100 %" not in page and "budget_exceeded" not in page.split("impact-summary")[1]
    assert (
        f'href="{reverse("preview-detail", args=[AGENT, preview.pk])}" id="impact-report"' in page
    )


def test_publish_page__environment_requires_a_preview__says_what_is_missing(ops, client):
    Environment.objects.filter(key="sg-test").update(require_preview=True)
    draft = _draft(max_input_tokens=4000)
    client.force_login(ops)

    page = _publish_page(client, draft)

    assert 'id="impact-required" data-code="preview_required"' in page
    assert "sg-test requires an impact preview before a publish" in page
    response = client.post(
        reverse("release-publish", args=[AGENT, STRATEGY, "sg-test"]),
        {"version": draft.number, "reason": "tighter budget", "revision": 0},
    )
    assert response.status_code == 409
    assert "requires an impact preview" in html.unescape(response.content.decode())


def test_publish_page__required_preview_over_few_traces__asks_for_a_reason(ops, client):
    sg_test = Environment.objects.get(key="sg-test")
    Environment.objects.filter(pk=sg_test.pk).update(require_preview=True)
    draft = _draft(max_input_tokens=4000)
    end = services.default_window()[1]
    preview, _ = services.preview_request(  # 3 days: fewer than 1,000 and not the whole week
        actor=ops, version=draft, environment=sg_test, window_start=end - timedelta(days=3)
    )
    _run(preview)
    client.force_login(ops)

    page = _publish_page(client, draft)

    assert 'id="impact-required" data-code="preview_few_traces"' in page
    assert f"covered only {preview.traces_done:,} traces" in page
    assert "say why the preview's traces are enough" in page


def test_approval_request__prod_publish_with_a_prod_preview__approver_sees_the_saved_preview(
    ops, client
):
    draft = _draft(max_input_tokens=4000)
    v4 = documents.version_freeze(draft=draft, actor=ops)
    prod = Environment.objects.get(key="prod")
    preview, _ = services.preview_request(actor=ops, version=v4, environment=prod)
    _run(preview)
    release_publish(version=v4, environment=prod, actor=ops, reason="tighter budget")
    approval = ApprovalRequest.objects.get(version=v4, environment=prod, status="pending")
    client.force_login(get_user_model().objects.get(username="ops2"))

    page = html.unescape(
        client.get(reverse("approval-detail", args=[AGENT, approval.pk])).content.decode()
    )

    assert 'id="impact-summary" data-state="complete"' in page
    assert "Impact on 0 traces of prod, last 7 days" in page
    # prod ran v1 and v2, which never asked for recent_dialogue: every trace is counted apart,
    # once each however many sources it lacks (issue 32.11).
    assert f"{preview.traces_done:,} not previewable (counted apart)" in page
    assert f'href="{reverse("preview-detail", args=[AGENT, preview.pk])}"' in page
    # Nothing could be compared: a warning that says so, never "no status changes".
    assert "nothing could be judged" in page and "no status changes" not in page
    assert 'id="impact-danger" data-danger="nothing_judged"' in page
    assert f"Nothing could be judged: 0 of {preview.traces_done:,} traces of prod" in page


def test_approval_request__no_preview_of_the_version__offers_preview_impact(ops, client):
    # The demo's waiting request (v3) has its saved preview: ops asks for a new version instead.
    v4 = documents.version_freeze(draft=_draft(max_input_tokens=4000), actor=ops)
    release_publish(
        version=v4, environment=Environment.objects.get(key="prod"), actor=ops, reason="budget"
    )
    approval = ApprovalRequest.objects.get(
        document__key=STRATEGY, environment__key="prod", status="pending"
    )
    assert approval.version == v4
    client.force_login(get_user_model().objects.get(username="ops2"))

    page = client.get(reverse("approval-detail", args=[AGENT, approval.pk])).content.decode()

    assert 'id="impact-none"' in page and 'id="impact-run"' in page
