"""The policy's answers: deny by default, scope per agent, console-wide rules, refusals logged."""

from __future__ import annotations

import pytest

from console.kernel.errors import Forbidden, NotFound
from console.kernel.models import AccessLogEntry, Role
from console.kernel.policy import (
    AUTHENTICATED,
    PUBLIC,
    Capability,
    Everywhere,
    agents_visible_to,
    agents_where,
    check_user_can,
    check_user_can_replay_trace,
    role_names,
    rule_allows,
    user_can,
    user_can_anywhere,
    user_can_replay_trace,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def agents(db):
    from strategies.catalog.models import Agent

    return {
        key: Agent.objects.create(key=key, name=key)
        for key in ("assistant_professional", "assistant_lite")
    }


def test_user_can__no_grant__nothing_anywhere(agents, make_user):
    nobody = make_user("nobody")
    assert not any(user_can(nobody, c, agents["assistant_lite"]) for c in Capability)
    assert list(agents_visible_to(nobody)) == []
    assert not user_can_anywhere(nobody, Capability.VIEW_CONFIG)


def test_user_can__operator_on_one_agent__only_there(agents, make_user):
    ops = make_user("ops", operator="assistant_professional")
    assert user_can(ops, Capability.EDIT_DRAFTS, agents["assistant_professional"])
    assert not user_can(ops, Capability.EDIT_DRAFTS, agents["assistant_lite"])
    assert not user_can(ops, Capability.EDIT_DRAFTS)  # not on all agents
    assert not user_can(ops, Capability.ROLLBACK, agents["assistant_professional"])
    assert [a.key for a in agents_visible_to(ops)] == ["assistant_professional"]


def test_user_can__admin_on_all_agents__everywhere(agents, make_user):
    admin = make_user("boss", admin=None)
    assert all(user_can(admin, c) for c in Capability)
    assert set(agents_where(admin, Capability.ROLLBACK)) == set(agents.values())
    assert role_names(admin) == ["admin@*"]


def test_user_can__role_without_capabilities__grants_nothing_not_even_sight(agents, make_user):
    Role.objects.create(name="empty")
    holder = make_user("holder", empty="assistant_professional")
    assert list(agents_visible_to(holder)) == []
    with pytest.raises(NotFound):
        check_user_can(holder, Capability.VIEW_CONFIG, agents["assistant_professional"])


def test_user_can__grant_through_group__counts(agents, make_user):
    from django.contrib.auth.models import Group

    from console.kernel.models import Grant

    team = Group.objects.create(name="support-team")
    Grant.objects.create(
        group=team, role=Role.objects.get(name="support"), agent=agents["assistant_lite"]
    )
    member = make_user("member")
    member.groups.add(team)
    assert user_can(member, Capability.VIEW_TRACES, agents["assistant_lite"])


def test_user_can__superuser_without_grant__nothing(agents, django_user_model):
    root = django_user_model.objects.create_superuser("root", password="root-pass-123")
    assert not user_can(root, Capability.VIEW_CONFIG, agents["assistant_lite"])


def test_check_user_can__out_of_scope_404_visible_but_forbidden_403__both_logged(agents, make_user):
    support = make_user("support", support="assistant_professional")
    with pytest.raises(NotFound):
        check_user_can(support, Capability.VIEW_TRACES, agents["assistant_lite"])
    with pytest.raises(Forbidden):
        check_user_can(support, Capability.PUBLISH, agents["assistant_professional"])
    rows = list(AccessLogEntry.objects.order_by("id").values_list("agent_key", "outcome", "detail"))
    assert [(a, o, d["capability"], d["status"]) for a, o, d in rows] == [
        ("assistant_lite", "denied", "view_traces", 404),
        ("assistant_professional", "denied", "publish", 403),
    ]


def test_check_user_can__refused_inside_a_transaction__logged_once_when_the_unit_of_work_ends(
    agents, make_user
):
    from django.db import transaction

    from console.kernel.policy import denials_logged
    from console.kernel.request_context import RequestContext, current_request

    support = make_user("support", support="assistant_professional")
    token = current_request.set(RequestContext(path="/x"))
    try:
        with denials_logged():
            with pytest.raises(Forbidden), transaction.atomic():
                check_user_can(support, Capability.PUBLISH, agents["assistant_professional"])
                # written inside the refused transaction, the row would roll back with it
            assert AccessLogEntry.objects.count() == 0
    finally:
        current_request.reset(token)
    assert AccessLogEntry.objects.get().detail["path"] == "/x"  # once, after the work ended


def test_rule_allows__each_kind_of_rule(agents, make_user):
    from django.contrib.auth.models import AnonymousUser

    pro_admin = make_user("pro_admin", admin="assistant_professional")
    assert rule_allows(AnonymousUser(), PUBLIC)
    assert not rule_allows(AnonymousUser(), AUTHENTICATED)
    assert rule_allows(pro_admin, Capability.MANAGE_GRANTS)  # agent-less: on some agent
    assert not rule_allows(pro_admin, Everywhere(Capability.MANAGE_GRANTS))
    assert not rule_allows(pro_admin, Capability.VIEW_CONFIG, agents["assistant_lite"])


def test_rule_allows__rule_per_method__write_needs_more(agents, make_user):
    viewer = make_user("viewer", viewer="assistant_professional")
    rule = {"GET": Capability.VIEW_CONFIG, "*": Capability.EDIT_DRAFTS}
    agent = agents["assistant_professional"]
    assert rule_allows(viewer, rule, agent, "GET")
    assert not rule_allows(viewer, rule, agent, "POST")
    assert not rule_allows(viewer, {"GET": Capability.VIEW_CONFIG}, agent, "DELETE")


def test_field_changes__created_object__one_added_row_per_field():
    from console.kernel.audit import field_changes

    changes = field_changes(None, {"name": "auditor", "caps": [], "body": {"a": {"b": True}}})
    assert changes == [
        {"path": "name", "before": None, "after": "auditor"},
        {"path": "caps", "before": None, "after": []},
        {"path": "body.a.b", "before": None, "after": True},
    ]
    assert field_changes({"x": 1}, None) == [{"path": "x", "before": 1, "after": None}]
    assert field_changes(None, None) == []


def test_replay_trace__needs_traces_and_configuration_of_the_agent(agents, make_user):
    professional, lite = agents["assistant_professional"], agents["assistant_lite"]
    Role.objects.create(name="trace-reader", capabilities=[Capability.VIEW_TRACES])
    support = make_user("sup", support=professional)
    reader = make_user("reader", **{"trace-reader": professional})
    assert user_can_replay_trace(support, professional)
    assert not user_can_replay_trace(support, lite)
    assert not user_can_replay_trace(reader, professional)  # a draft's body is configuration
    with pytest.raises(NotFound):
        check_user_can_replay_trace(support, lite)
    with pytest.raises(Forbidden):
        check_user_can_replay_trace(reader, professional)
    denied = AccessLogEntry.objects.filter(action="access.denied").order_by("id")
    assert [entry.detail["capability"] for entry in denied] == ["view_traces", "view_config"]
