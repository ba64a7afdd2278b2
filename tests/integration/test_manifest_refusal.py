"""A runtime's manifest report that would leave a live version unservable is refused (issue 32
item 5): the SDK's example, run once with sg-test's token, replaced sg-test's manifest with its
smaller one and blocked every publish there. Refused with 409 naming each finding; the manifest
kept says which runtime reported it (name, instance, when, token)."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from console.kernel.models import AccessLogEntry, AuditRecord
from strategies.catalog.models import Manifest
from strategies.releases.services import release_publish
from tests.factories import manifest_body, release_setup, runtime_token

MANIFEST = "/api/v1/runtime/manifest"
RUNTIMES = "/releases/assistant_professional/runtimes/"

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(db):
    """sg-test serves profile v1 and after_sales_consultation v3, which falls back to the
    general_policy_only handler its runtime implements."""
    w = release_setup()
    w.sg = w.envs["sg-test"]
    release_publish(version=w.profile[1], environment=w.sg, actor=w.ops)
    release_publish(version=w.strategy[3], environment=w.sg, actor=w.ops)
    w.secret = runtime_token(w.sg)
    return w


def more_than_before() -> dict:
    """What sg-test's runtime reported, and one tool more: it breaks nothing."""
    body = manifest_body()
    body["tools"] = [*body["tools"], "refund_order"]
    return body


def report(client, secret, body, instance="pod-7:4242"):
    return client.put(
        MANIFEST,
        data=json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {secret}",
        HTTP_X_RUNTIME_INSTANCE=instance,
    )


def test_manifest_put__lacks_what_live_needs__409_names_each_finding_manifest_kept(client, world):
    before = list(Manifest.objects.filter(environment=world.sg).values_list("pk", "version"))
    audits = AuditRecord.objects.count()
    example = {"runtime": "sdk example", **manifest_body(handlers=[])}

    response = report(client, world.secret, example, instance="laptop:99")

    assert response.status_code == 409, response.content
    error = response.json()["error"]
    assert error["code"] == "manifest_breaks_live"
    assert "after_sales_consultation v3" in error["message"]
    assert "sg-test" in error["message"] and "token" in error["message"]
    assert any(
        "general_policy_only" in d["message"] and d["message"].startswith("assistant_professional")
        for d in error["details"]
    )
    assert all({"path", "code", "message"} <= set(d) for d in error["details"])
    [live] = error["live"]
    assert (live["document"], live["version"]) == ("after_sales_consultation", 3)
    # nothing stored, nothing audited: every publish there still checks against the old one
    assert list(Manifest.objects.filter(environment=world.sg).values_list("pk", "version")) == (
        before
    )
    assert AuditRecord.objects.count() == audits


def test_manifest_put__breaks_nothing_live__new_version_says_who_reported_it(client, world):
    body = {"runtime": "bank-assistant 2026.12.1", **more_than_before()}

    response = report(client, world.secret, body, instance="pod-7:4242")

    assert response.status_code == 200, response.content
    assert response.json() == {"version": 2, "warnings": []}
    row = Manifest.objects.get(environment=world.sg, version=2)
    assert (row.runtime, row.instance) == ("bank-assistant 2026.12.1", "pod-7:4242")
    assert row.reported_by == "test sg-test"
    audit = AuditRecord.objects.filter(action="manifest.record").order_by("-id").first()
    assert audit.after["instance"] == "pod-7:4242"


def test_manifest_put__after_live_stops_needing_it__accepted(client, world):
    """Expand/contract: publish what the smaller runtime can serve, then it reports."""
    smaller = manifest_body(handlers=[])
    assert report(client, world.secret, smaller).status_code == 409

    release_publish(version=world.strategy[2], environment=world.sg, actor=world.ops)
    response = report(client, world.secret, smaller)

    assert response.status_code == 200, response.content
    assert Manifest.objects.filter(environment=world.sg).latest("version").body["handlers"] == []


def test_manifest_put__instance_header_not_printable__stored_without_it(client, world):
    response = report(client, world.secret, more_than_before(), instance="\tbad")

    assert response.status_code == 200, response.content
    assert Manifest.objects.filter(environment=world.sg).latest("version").instance == ""


def test_manifest_schema__409_documented(client, world):
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    put = schema["paths"]["/api/v1/runtime/manifest"]["put"]
    assert "409" in put["responses"]
    assert "manifest_breaks_live" in put["responses"]["409"]["description"]


def test_manifest_put__refused__access_logged_and_runtimes_page_says_who_tried(client, world):
    example = {"runtime": "sdk example", **manifest_body(handlers=[])}
    assert report(client, world.secret, example, instance="laptop:99").status_code == 409

    [row] = AccessLogEntry.objects.filter(action="manifest.refuse")
    assert (row.outcome, row.target_id) == ("denied", str(world.sg.pk))
    assert row.detail == {
        "runtime": "sdk example",
        "instance": "laptop:99",
        "token": "test sg-test",
        "live": ["assistant_professional after_sales_consultation v3"],
        "findings": 1,
    }
    page = Client()
    page.force_login(world.ops)
    text = page.get(RUNTIMES).content.decode()
    assert 'data-manifest-refused="sg-test"' in text
    assert '<strong>sdk example</strong> on <span class="mono">laptop:99</span>' in text
    assert "after_sales_consultation v3" in text

    # A later accepted report: the refusal is history, no longer on the page.
    assert report(client, world.secret, more_than_before()).status_code == 200
    assert 'data-manifest-refused="sg-test"' not in page.get(RUNTIMES).content.decode()


def test_manifest_put__archived_environment__report_that_breaks_nothing_accepted(client, world):
    """Archiving stops new publishes, not what is live there nor its runtime's reports."""
    from strategies.catalog.services import environment_archive

    environment_archive(environment=world.sg, actor=world.admin)

    response = report(client, world.secret, more_than_before())

    assert response.status_code == 200, response.content
    assert response.json()["warnings"] == []
