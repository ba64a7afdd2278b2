"""The one list of audit and access-log actions (console.kernel.audit): every member stands for
exactly the string stored today, the writers refuse anything that is not one of their log's
members, and no call site in the code base writes an action as a bare string."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from console.kernel.audit import (
    AccessAction,
    AuditAction,
    access_record,
    action_filter_choices,
    audit_record,
)
from strategies.releases.models import ReleaseEvent

ROOT = Path(__file__).resolve().parents[2]
WRITERS = {"audit_record": AuditAction, "access_record": AccessAction}
# Access-log rows written through a helper that passes its `action` on to access_record.
FORWARDERS = {"trace_look_record": AccessAction}


@pytest.mark.parametrize("member", [*AuditAction, *AccessAction], ids=str)
def test_member__round_trips_to_its_stored_string(member):
    enum = type(member)
    assert enum(member.value) is member
    assert str(member) == member.value == f"{member}"
    assert re.fullmatch(r"[a-z_]+\.[a-z_]+", member.value)
    assert member.label and member.label != member.value
    assert member.family == member.value.split(".")[0] + "."


def test_members__each_string_in_one_log_only_and_labels_unique():
    audit = {m.value for m in AuditAction}
    access = {m.value for m in AccessAction}
    assert audit & access == set()
    for enum in (AuditAction, AccessAction):
        labels = [m.label for m in enum]
        assert len(labels) == len(set(labels)), enum


def test_members__stored_strings_as_written_before_the_enum():
    """Rows already written (and their hashes) name these strings: they must never change."""
    assert {m.value for m in AccessAction} == {
        "trace.view",
        "trace.search",
        "trace.list",
        "trace.export",
        "trace.replay",  # issue 20: the engine re-run on a trace, and impact previews
        "preview.request",
        "preview.view",
        "preview.cancel",
        "snapshot.view",
        "outcome.view",  # issue 22: outcomes of a request
        "audit.export",
        "config.export",
        "auth.login",
        "auth.session_expire",  # issue 33: a session ended idle or past its lifetime
        "auth.reauthenticate",  # issue 33: a password confirmed before a dangerous action
        "auth.second_factor",  # issue 33 item 4: a code or key at sign-in or re-authentication
        "access.denied",
        "manifest.refuse",  # issue 32: a runtime's manifest that would break live
        "regression_set.view",  # issue 35: a regression set's kept requests read
        "regression_set.check",  # issue 35: a version checked against kept requests
    }
    assert {m.value for m in AuditAction} == {
        *(f"agent.{a}" for a in ("create", "update", "archive", "unarchive", "delete")),
        *(f"environment.{a}" for a in ("create", "update", "archive", "unarchive", "delete")),
        "environment.break_glass",  # issue 19, item 3: approvals switched off by one person
        "environment.break_glass_end",
        # issue 34 item 2: freeze windows, change hours, the freeze break-glass, schedules
        *(f"freeze_window.{a}" for a in ("create", "delete")),
        "change_hours.set",
        *(f"freeze_break_glass.{a}" for a in ("start", "end")),
        *(f"schedule.{a}" for a in ("create", "cancel", "fire", "refuse")),
        "document.create",
        "manifest.record",
        *(f"draft.{a}" for a in ("create", "update", "discard")),
        "version.freeze",
        *(f"release.{a}" for a in ("publish", "approve", "rollback", "promote")),
        *(f"shadow.{a}" for a in ("start", "stop")),  # issue 22: shadow releases
        # issue 23: staged rollouts
        *(
            f"rollout.{a}"
            for a in ("start", "approve", "pause", "resume", "step", "extend", "complete")
        ),
        *(f"rollout.{a}" for a in ("stop", "rollback")),
        *(f"rollout.{a}" for a in ("watch_warn", "watch_end")),  # issue 23 item 4: the watch
        *(f"approval.{a}" for a in ("request", "reject", "withdraw")),
        "config.import",
        # issue 35: regression sets
        *(f"regression_set.{a}" for a in ("create", "update", "delete")),
        *(f"regression_member.{a}" for a in ("add", "remove", "expire")),
        *(f"webhook.{a}" for a in ("create", "delete")),
        *(f"runtime_token.{a}" for a in ("create", "revoke")),
        *(f"outcome_kind.{a}" for a in ("declare", "update", "retire", "restore")),
        "redaction_rule.create",  # issue 34.4: data protection
        "redaction_rule.delete",
        "principal.erase",
        "alert_rule.create",
        "alert_rule.update",
        "alert_silence.create",
        "alert_silence.lift",
        *(f"role.{a}" for a in ("create", "update")),
        *(f"grant.{a}" for a in ("create", "revoke")),
        "auth.unlock",
        "sso_account.create",  # issue 33: single sign-on
        *(f"group_mapping.{a}" for a in ("create", "delete", "role_missing")),
        # issue 33 item 4: break-glass accounts, second factors
        *(f"break_glass_account.{a}" for a in ("mark", "unmark")),
        *(f"second_factor.{a}" for a in ("enrol", "remove", "recovery_codes")),
        *(f"siem_destination.{a}" for a in ("create", "update", "pause", "resume", "delete")),
        *(f"scim_token.{a}" for a in ("create", "revoke")),  # issue 33: SCIM provisioning
        *(f"scim_user.{a}" for a in ("create", "update", "deactivate", "reactivate", "delete")),
        "scim_user.link",
        *(f"scim_group.{a}" for a in ("create", "update", "delete")),
        # issue 34 item 1: external change approvals
        "approval.approve_held",  # approved, held until the change record is approved too
        "change_system.update",
        *(
            f"change_record.{a}"
            for a in (
                "request",
                "delivery_fail",
                "approve",
                "reject",
                "expire",
                "refuse",
                "use",
                "go_live_refused",
            )
        ),
        *(f"personal_token.{a}" for a in ("create", "revoke")),
        *(f"admin.{a}" for a in ("add", "change", "change_related", "delete", "password_change")),
    }


@pytest.mark.parametrize(
    "writer, action, error",
    [
        (audit_record, "agent.made_up", TypeError),  # a string that is no member's value
        (audit_record, "", TypeError),
        (audit_record, "agent.create", TypeError),  # a member's value, but not the member
        (audit_record, "AGENT_CREATE", TypeError),  # a member's name is not its value
        (audit_record, AccessAction.TRACE_VIEW, TypeError),  # the other log's member
        (audit_record, None, TypeError),
        (audit_record, 3, TypeError),
        (access_record, "trace.peek", TypeError),
        (access_record, "agent.create", TypeError),  # an audit action's string
        (access_record, AuditAction.AGENT_CREATE, TypeError),
        (access_record, ReleaseEvent.Action.PUBLISH, TypeError),  # some other enum
    ],
)
def test_writers__anything_but_their_logs_member__refused_before_any_write(writer, action, error):
    # No database in unit tests: the refusal comes before the row is even built.
    with pytest.raises(error):
        writer(actor=None, action=action)


def test_filter_choices__every_member_with_its_label_and_the_families():
    groups = dict(action_filter_choices(AuditAction))
    offered = {value: label for options in groups.values() for value, label in options}
    for member in AuditAction:
        assert offered[member.value] == f"{member.label} ({member.value})"
    assert offered["grant."] == "Every grant action (grant.*)"
    assert offered["runtime_token."] == "Every runtime token action (runtime_token.*)"
    assert "version." not in offered  # a family of one is the member itself
    assert set(offered) - {m.value for m in AuditAction} == {
        f for f in groups if sum(m.family == f for m in AuditAction) > 1
    }


# --- the code base: every action written is a member -----------------------------------------------
def _calls():
    """(where, writer, the `action` argument) of every audit_record/access_record call (and of
    the helpers that forward to access_record) in console/, strategies/ and traces/."""
    names = WRITERS | FORWARDERS
    for package in ("console", "strategies", "traces"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            relative = str(path.relative_to(ROOT))
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.Call):
                    continue
                func = node.func
                name = getattr(func, "id", None) or getattr(func, "attr", None)
                if name not in names:
                    continue
                action = next((k.value for k in node.keywords if k.arg == "action"), None)
                yield f"{relative}:{node.lineno}", relative, names[name], action


def test_code_base__every_action_written__a_member_of_its_log():
    calls = list(_calls())
    assert len(calls) > 40  # the scan sees the call sites
    bare, wrong_log = [], []
    for where, _path, enum, action in calls:
        assert action is not None, f"{where}: no action= keyword"
        if isinstance(action, ast.Constant | ast.JoinedStr):
            bare.append((where, enum, action))
        for node in ast.walk(action):  # AuditAction.X / AccessAction.Y, also inside an `if`
            if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)):
                continue
            if node.value.id in ("AuditAction", "AccessAction") and (
                node.value.id != enum.__name__ or node.attr not in enum.__members__
            ):
                wrong_log.append(f"{where}: {ast.unparse(node)}")
    assert [where for where, _, _ in bare] == []
    assert wrong_log == []


def test_release_events__each_has_its_audit_action():
    """Every way a release pointer moves is written as its own audit action."""
    from strategies.releases.services.move import RELEASE_ACTIONS
    from strategies.releases.services.shadow_move import SHADOW_ACTIONS

    assert set(RELEASE_ACTIONS) | set(SHADOW_ACTIONS) == set(ReleaseEvent.Action)
    assert not set(RELEASE_ACTIONS) & set(SHADOW_ACTIONS)
    assert {a.family for a in RELEASE_ACTIONS.values()} == {"release."}
    assert {a.family for a in SHADOW_ACTIONS.values()} == {"shadow."}
