"""Lifecycle guarantees on real PostgreSQL: frozen versions are immutable in the database,
concurrent saves of one draft never overwrite silently (configuration files: test_config_as_code),
manifests are versioned only when they change."""

from __future__ import annotations

import copy
import json
import threading
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import DatabaseError, connection, connections, transaction

from console.demo import data
from console.demo import documents as demo
from console.kernel.errors import Conflict
from console.kernel.models import AuditRecord
from strategies.catalog import selectors as catalog
from strategies.catalog import services as catalog_services
from strategies.catalog.models import Manifest
from strategies.documents import selectors, services
from strategies.documents.models import Document, Version
from strategies.releases import selectors as release_selectors
from tests.factories import (
    AgentFactory,
    DocumentFactory,
    EnvironmentFactory,
    FrozenVersionFactory,
    ManifestFactory,
    ReleaseFactory,
    frozen_version,
    frozen_versions,
    manifest_body,
    profile_body,
    strategy_bodies_v1_to_v3,
    strategy_body,
)


def _strategy():
    return Document.objects.get(key="after_sales_consultation")


@pytest.fixture
def agent_documents(db):
    """assistant_professional with its profile (v1) and after_sales_consultation v1–v3,
    frozen through the services."""
    agent = AgentFactory(key="assistant_professional")
    frozen_version(DocumentFactory(agent=agent, profile=True), profile_body())
    frozen_versions(
        DocumentFactory(agent=agent, key="after_sales_consultation"), strategy_bodies_v1_to_v3()
    )
    return agent


def test_frozen_version__raw_sql_update__refused_by_database(agent_documents):
    v3 = _strategy().versions.get(number=3)
    with pytest.raises(DatabaseError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("UPDATE strategies_version SET body = '{}'::jsonb WHERE id = %s", [v3.pk])
    v3.refresh_from_db()
    assert v3.body["max_extra_reads"] == 2


def test_frozen_version__raw_sql_delete__refused_by_database(agent_documents):
    v1 = _strategy().versions.get(number=1)
    with pytest.raises(DatabaseError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("DELETE FROM strategies_version WHERE id = %s", [v1.pk])
    assert Version.objects.filter(pk=v1.pk).exists()


@pytest.mark.django_db(transaction=True)
def test_draft_update__two_threads_same_revision__one_wins_other_409(make_user):
    # Given a draft at revision 1, read by two editors
    agent = AgentFactory(key="assistant_professional")
    DocumentFactory(agent=agent, key="after_sales_consultation")
    ops = make_user("ops_a", operator=agent)
    draft = services.draft_create(document=_strategy(), body=strategy_body(), actor=ops)
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def save(extra_reads: int):
        try:
            barrier.wait(timeout=10)
            services.draft_update(
                draft=Version.objects.get(pk=draft.pk),
                body=strategy_body(max_extra_reads=extra_reads),
                revision=1,
                actor=ops,
            )
            outcomes.append("saved")
        except Conflict as exc:
            assert exc.extra["current"]["revision"] == 2
            outcomes.append("conflict")
        finally:
            connections.close_all()

    # When both save from their own thread (their own database connection)
    threads = [threading.Thread(target=save, args=(n,)) for n in (4, 7)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)

    # Then exactly one save landed and the other got 409
    assert sorted(outcomes) == ["conflict", "saved"]
    draft.refresh_from_db()
    assert draft.revision == 2
    assert draft.body["max_extra_reads"] in (4, 7)
    assert AuditRecord.objects.filter(action="draft.update").count() == 1


def test_manifest_record__identical_body__no_new_version(agent_documents):
    # bank-uat's runtime does not implement general_policy_only yet
    EnvironmentFactory(key="bank-uat", manifest=manifest_body(handlers=[]))
    env = catalog.environment_get(key="bank-uat")
    body = copy.deepcopy(Manifest.objects.filter(environment=env).latest("version").body)
    manifest, created = catalog_services.manifest_record(
        environment=env, body=body, runtime="x", reported_by="test"
    )
    assert created is False and manifest.version == 1
    body["handlers"] = ["general_policy_only"]
    manifest, created = catalog_services.manifest_record(
        environment=env, body=body, runtime="bank-assistant 2026.12", reported_by="test"
    )
    assert created is True and manifest.version == 2
    report = selectors.document_validate(
        kind="strategy", body=_strategy().versions.get(number=3).body, environment=env
    )
    assert report.manifest_errors == []


def test_manifest_load__malformed_file__command_error_nothing_written(db, tmp_path):
    EnvironmentFactory(key="prod", manifest=manifest_body())
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"providers": "task_state"}))
    count = Manifest.objects.count()
    with pytest.raises(Exception, match="providers"):
        call_command("manifest_load", "--environment", "prod", str(path), stdout=StringIO())
    assert Manifest.objects.count() == count


def test_demo__loaded_twice__same_versions(demo_world):
    before = list(Version.objects.values_list("pk", "content_hash"))
    demo.load()
    assert list(Version.objects.values_list("pk", "content_hash")) == before
    profile = Document.objects.get(agent__key="assistant_professional", key="profile")
    assert profile.versions.get(number=1).body == data.BANK_PROFILE


def test_live_findings__manifest_drops_handler__live_v3_warned(agent_documents):
    prod = EnvironmentFactory(key="prod", protected=True, manifest=manifest_body())
    ReleaseFactory(version=_strategy().versions.get(number=3), environment=prod)
    assert release_selectors.live_findings(environment=prod) == []
    body = manifest_body(handlers=[])
    catalog_services.manifest_record(environment=prod, body=body, reported_by="test")
    [warning] = release_selectors.live_findings(environment=prod)
    assert (warning["document"], warning["version"]) == ("after_sales_consultation", 3)
    assert warning["errors"][0]["path"] == "on_missing.order_delivery"


def test_validate__environment_without_manifest__says_runtime_not_reported(db):
    version = FrozenVersionFactory()
    silent = EnvironmentFactory(key="eu-test")
    report = selectors.document_validate(kind="strategy", body=version.body, environment=silent)
    assert [e["code"] for e in report.manifest_errors] == ["no_manifest"]
    reported = ManifestFactory(environment=EnvironmentFactory(key="eu-prod"))
    report = selectors.document_validate(
        kind="strategy", body=version.body, environment=reported.environment
    )
    assert report.as_dict()["valid"] is True and report.manifest_version == 1


# --- version numbers are never given twice (issue 32 item 11) --------------------------------------
def test_draft_create__after_a_discarded_draft__gets_a_new_number(db):
    # Given a strategy with v1 frozen, whose draft v2 was discarded
    document = DocumentFactory()
    frozen_version(document)
    discarded = services.draft_create(document=document, body=strategy_body(), actor=None)
    services.draft_discard(draft=discarded, actor=None)
    # When the next draft is opened
    draft = services.draft_create(
        document=document, body=strategy_body(max_extra_reads=2), actor=None
    )
    # Then it is v3: "v2" in the audit names the discarded content only
    assert (discarded.number, draft.number) == (2, 3)
    labels = list(
        AuditRecord.objects.filter(action__in=["draft.create", "draft.discard"])
        .order_by("id")
        .values_list("action", "target_label")
    )
    assert [label.split(" ")[1] for _, label in labels] == ["v1", "v2", "v2", "v3"]


def test_document__version_counter__the_database_refuses_to_move_it_back(db):
    document = DocumentFactory()
    frozen_version(document)
    with pytest.raises(DatabaseError), transaction.atomic():
        Document.objects.filter(pk=document.pk).update(last_version_number=0)


@pytest.mark.django_db(transaction=True)
def test_draft_create__two_at_once__two_numbers_one_draft_and_no_number_reused():
    document = DocumentFactory()
    frozen_version(document)
    barrier, outcomes = threading.Barrier(2), []

    def open_draft():
        try:
            barrier.wait()
            outcomes.append(
                services.draft_create(document=document, body=strategy_body(), actor=None)
            )
        except Conflict as exc:
            outcomes.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=open_draft) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    drafts = [o for o in outcomes if isinstance(o, Version)]
    assert len(drafts) == 1 and drafts[0].number == 2
    assert [o.code for o in outcomes if isinstance(o, Conflict)] == ["draft_exists"]
    services.draft_discard(draft=drafts[0], actor=None)
    assert services.draft_create(document=document, body=strategy_body(), actor=None).number == 3
