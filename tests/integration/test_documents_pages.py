"""Document pages through the Django client: scope, the profile grid, the draft editor's
as-you-type validation, stale saves and the compare page."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from strategies.documents import selectors, services
from strategies.documents.models import Document, Version
from tests.factories import (
    AgentFactory,
    DocumentFactory,
    EnvironmentFactory,
    ReleaseFactory,
    frozen_version,
    frozen_versions,
    manifest_body,
    profile_body,
    strategy_bodies_v1_to_v3,
    strategy_body,
    user_with_grants,
)

AGENT = "/agents/assistant_professional/"
DOC = AGENT + "documents/after_sales_consultation/"
HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def documents(db):
    """assistant_professional with its profile (v1) and after_sales_consultation v1–v3;
    assistant_lite with its profile (v1), whose agentWhitelist switch was never set; the
    environments sg-test and prod, whose runtimes implement everything v3 needs, and bank-uat,
    whose runtime lacks the general_policy_only handler v3 falls back to."""
    professional = AgentFactory(key="assistant_professional")
    lite = AgentFactory(key="assistant_lite")
    frozen_version(DocumentFactory(agent=professional, profile=True), profile_body())
    frozen_versions(
        DocumentFactory(agent=professional, key="after_sales_consultation"),
        strategy_bodies_v1_to_v3(),
    )
    lite_profile = profile_body()
    del lite_profile["switches"]["temporalAnchor.agentWhitelist"]
    frozen_version(DocumentFactory(agent=lite, profile=True), lite_profile)
    envs = {
        "sg-test": EnvironmentFactory(key="sg-test", position=1, manifest=manifest_body()),
        "bank-uat": EnvironmentFactory(
            key="bank-uat", position=2, manifest=manifest_body(handlers=[])
        ),
        "prod": EnvironmentFactory(
            key="prod", position=3, protected=True, manifest=manifest_body()
        ),
    }
    return SimpleNamespace(professional=professional, lite=lite, envs=envs)


@pytest.fixture
def ops(client, documents):
    client.force_login(user_with_grants("ops", operator=documents.professional))
    return client


@pytest.fixture
def viewer(client, documents):
    """A client signed in as a viewer of assistant_lite."""
    client.force_login(user_with_grants("viewer", viewer=documents.lite))
    return client


def _profile():
    return Document.objects.get(agent__key="assistant_professional", key="profile")


def _strategy():
    return Document.objects.get(agent__key="assistant_professional", key="after_sales_consultation")


def _grid_post(document, **changes) -> dict:
    """The grid form as the browser sends it: every section that is on, plus `present`."""
    body = (
        selectors.draft_get(document=document) or selectors.latest_frozen(document=document)
    ).body
    data = {"present": [], "revision": ""}
    draft = selectors.draft_get(document=document)
    if draft:
        data["revision"] = str(draft.revision)
    for block, entries in body["sections"].items():
        for key, on in entries.items():
            name = f"sections.{block}.{key}"
            data["present"].append(name)
            if changes.get(key, on):
                data[name] = "on"
    for name, value in body["switches"].items():
        data["present"].append(f"switches.{name}")
        if value is True:
            data[f"switches.{name}"] = "on"
        elif isinstance(value, str):
            data[f"switches.{name}"] = value
    return data


def test_agent_list__operator__only_their_agent_and_bounded_queries(ops):
    with CaptureQueriesContext(connection) as queries:
        response = ops.get("/agents/")
    assert response.status_code == 200
    assert b'data-agent="assistant_professional"' in response.content
    assert b"assistant_lite" not in response.content
    assert len(queries) < 25


def test_agent_detail__out_of_scope__404(ops):
    assert ops.get("/agents/assistant_lite/").status_code == 404


def test_profile_grid__shows_toggles_and_sensitive_marks(ops):
    with CaptureQueriesContext(connection) as queries:
        response = ops.get(AGENT)
    assert len(queries) < 20
    html = response.content.decode()
    assert response.status_code == 200
    assert 'data-section="personal_particulars" class="is-sensitive-row"' in html
    assert 'name="sections.user_context.high_level_profile" aria-label' in html


def test_profile_grid__toggle_off__opens_draft_and_keeps_other_sections(ops):
    response = ops.post(AGENT + "profile/", _grid_post(_profile(), chat_topic=False), **HTMX)
    assert response.status_code == 200
    draft = selectors.draft_get(document=_profile())
    assert draft.body["sections"]["query_context"]["chat_topic"] is False
    assert draft.body["sections"]["query_context"]["truth"] is True
    assert draft.body["switches"]["queryRelatedContextInjectorMode"] == "default"
    assert b"Draft v2" in response.content


def test_profile_grid__operator_switches_on_sensitive__refused_with_message(ops):
    response = ops.post(AGENT + "profile/", _grid_post(_profile(), state_of_mind=True), **HTMX)
    assert response.status_code == 403
    assert b"state_of_mind" in response.content and b"sensitive" in response.content
    assert selectors.draft_get(document=_profile()) is None


def test_profile_grid__stale_revision__409_and_reload_link(ops):
    ops.post(AGENT + "profile/", _grid_post(_profile(), chat_topic=False), **HTMX)
    stale = _grid_post(_profile(), truth=False)
    stale["revision"] = "1"
    ops.post(AGENT + "profile/", _grid_post(_profile(), contact_list=False), **HTMX)
    response = ops.post(AGENT + "profile/", stale, **HTMX)
    assert response.status_code == 409
    assert b"Reload the profile" in response.content


def test_draft_validate__typing_bad_number__error_at_its_field(ops):
    services.draft_create(document=_strategy(), body=strategy_body(), actor=None)
    response = ops.post(
        DOC + "draft/validate/",
        {
            "edited": "form",
            "json": "{}",
            "required": "task_state, order_delivery",
            "budget_max_input_tokens": "lots",
            "environment": "",
        },
        **HTMX,
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert 'data-path="budget.max_input_tokens"' in html
    assert 'id="fe-budget_max_input_tokens" class="field-error-slot" hx-swap-oob="true"' in html
    assert 'id="json-editor"' in html  # the JSON half follows the fields


def test_draft_validate__json_against_bank_uat__manifest_finding(ops):
    services.draft_create(document=_strategy(), body=strategy_body(), actor=None)
    v3 = _strategy().versions.get(number=3)
    import json

    response = ops.post(
        DOC + "draft/validate/",
        {"edited": "json", "json": json.dumps(v3.body), "environment": "bank-uat"},
        **HTMX,
    )
    html = response.content.decode()
    assert "Cannot be published to bank-uat yet" in html and "general_policy_only" in html
    assert 'id="fields-panel"' in html  # the fields follow the JSON


def test_draft_validate__malformed_json__readable_error(ops):
    services.draft_create(document=_strategy(), body=strategy_body(), actor=None)
    response = ops.post(DOC + "draft/validate/", {"edited": "json", "json": "{"}, **HTMX)
    assert b"Not valid JSON" in response.content


def test_draft_edit__stale_save__409_page_offers_reload_and_keeps_text(ops):
    import json

    draft = services.draft_create(document=_strategy(), body=strategy_body(), actor=None)
    services.draft_update(
        draft=draft, body=strategy_body(max_extra_reads=2), revision=1, actor=None
    )
    mine = strategy_body(max_extra_reads=5)
    response = ops.post(DOC + "draft/", {"json": json.dumps(mine), "revision": "1", "note": "mine"})
    html = response.content.decode()
    assert response.status_code == 409
    assert "someone else saved this draft" in html and "saved revision 2" in html
    assert "Load their version" in html and 'name="overwrite" value="2"' in html
    assert "&quot;max_extra_reads&quot;: 5" in html
    draft.refresh_from_db()
    assert draft.body["max_extra_reads"] == 2


def test_draft_edit__save_and_freeze__frozen_version_page(ops):
    import json

    services.draft_create(document=_strategy(), body=strategy_body(), actor=None)
    response = ops.post(
        DOC + "draft/",
        {"json": json.dumps(strategy_body()), "revision": "1", "note": "n", "then": "freeze"},
    )
    assert response.status_code == 302 and response["Location"].endswith("/versions/4/")
    assert _strategy().versions.get(number=4).state == Version.State.FROZEN


def test_draft_edit__fields_changed_without_js__fields_win(ops):
    import json

    services.draft_create(document=_strategy(), body=strategy_body(), actor=None)
    form = {"json": json.dumps(strategy_body()), "revision": "1", "note": ""}
    form.update(
        required="task_state, order_delivery",
        optional="applicable_policy",
        allowed_tools="lookup_order",
        max_extra_reads="3",
        budget_max_input_tokens="6000",
        budget_reserve_output_tokens="800",
    )
    assert ops.post(DOC + "draft/", form).status_code == 302
    assert selectors.draft_get(document=_strategy()).body["max_extra_reads"] == 3


def test_version_compare__any_two_versions__plain_words(ops):
    response = ops.get(DOC + "compare/?a=2&b=3")
    html = response.content.decode()
    assert "applicable_policy added to required sources" in html
    assert "When order_delivery is missing, use general_policy_only" in html


def test_viewer__draft_edit__403(viewer):
    response = viewer.get("/agents/assistant_lite/documents/profile/draft/")
    assert response.status_code == 403


def test_strategies_tab__new_strategy__opens_its_draft(ops):
    response = ops.post(AGENT + "strategies/", {"key": "refund_request", "name": "Refunds"})
    assert response.status_code == 302
    assert response["Location"].endswith("/documents/refund_request/draft/")
    bad = ops.post(AGENT + "strategies/", {"key": "profile"})
    assert bad.status_code == 400 and b"reserved" in bad.content


def test_profile_draft_editor__json_save__draft_updated(ops):
    import json

    draft = services.draft_create(document=_profile(), body=profile_body(), actor=None)
    page = ops.get(AGENT + "documents/profile/draft/")
    assert page.status_code == 200 and b"json-editor" in page.content
    assert b'id="fields-panel"' not in page.content  # the grid is the profile's form
    body = profile_body()
    body["switches"]["toolPrefilter.enabled"] = True
    response = ops.post(
        AGENT + "documents/profile/draft/", {"json": json.dumps(body), "revision": "1"}
    )
    assert response.status_code == 302
    draft.refresh_from_db()
    assert draft.body["switches"]["toolPrefilter.enabled"] is True


def test_draft_edit__first_visit__checks_against_first_environment(ops):
    services.draft_create(
        document=_strategy(), body=_strategy().versions.get(number=3).body, actor=None
    )
    html = ops.get(DOC + "draft/").content.decode()
    assert 'data-environment="sg-test"' in html
    html = ops.get(DOC + "draft/?environment=bank-uat").content.decode()
    assert "general_policy_only" in html and "Cannot be published to bank-uat yet" in html


def test_live_release__grid_marks_difference_and_versions_show_where_live(ops, documents):
    # Given v1 of the profile live in prod and v2 of the strategy live in bank-uat
    ReleaseFactory(version=_profile().versions.get(number=1), environment=documents.envs["prod"])
    ReleaseFactory(
        version=_strategy().versions.get(number=2), environment=documents.envs["bank-uat"]
    )
    # When ops switches chat_topic off in a draft
    ops.post(AGENT + "profile/", _grid_post(_profile(), chat_topic=False), **HTMX)
    html = ops.get(AGENT).content.decode()
    # Then prod's live cell for chat_topic is marked as differing from the draft
    row = html.split('data-section="chat_topic"')[1].split("</tr>")[0]
    assert 'data-env="prod"' in row and "is-changed" in row
    # And the strategy's versions say where each one is live
    versions = ops.get(DOC).content.decode()
    v2_row = versions.split('data-version="2"')[1].split("</tr>")[0]
    assert "bank-uat" in v2_row
    api = ops.get("/api/v1/agents/assistant_professional/documents/").json()["results"]
    assert {d["key"]: d["live"] for d in api}["after_sales_consultation"]["bank-uat"] == 2


def test_new_draft__one_already_open__lands_in_that_draft(ops):
    services.draft_create(document=_strategy(), body=strategy_body(), actor=None)
    response = ops.post(DOC + "draft/new/", follow=True)
    assert response.redirect_chain[-1][0].endswith("/draft/")
    assert b"already has an open draft" in response.content


def test_draft_validate__json_nested_too_deep__readable_error(ops):
    services.draft_create(document=_strategy(), body=strategy_body(), actor=None)
    deep = "[" * 20000 + "]" * 20000
    response = ops.post(DOC + "draft/validate/", {"edited": "json", "json": deep}, **HTMX)
    assert response.status_code == 200
    assert b"nested too deeply" in response.content


def test_profile_grid__agent_whitelist_unset__empty_box_not_none(viewer):
    html = viewer.get("/agents/assistant_lite/").content.decode()
    box = html.split('name="switches.temporalAnchor.agentWhitelist"')[1].split(">")[0]
    assert 'value=""' in box and "disabled" in box
