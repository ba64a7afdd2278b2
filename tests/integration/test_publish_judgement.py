"""One publish judgement (strategies.releases.selectors.publish_refusals): the import's plan
and the publish itself judge the same version in the same environment for the same person the
same way — the same findings, and the publish raises from them with the status, code and
message it always had, while the plan shows them as a skip, an approval request or a finding
that stops the import."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from console.kernel.errors import ApplicationError
from strategies.catalog.services import environment_archive
from strategies.exchange.selectors import config_export, config_plan
from strategies.exchange.services import config_read
from strategies.releases.selectors import is_runtime_finding, publish_refusals
from strategies.releases.services import release_publish
from tests.factories import (
    SAMPLE_AGENT,
    STRATEGY_KEY,
    EnvironmentFactory,
    RoleFactory,
    frozen_version,
    grant,
    manifest_body,
    profile_body,
    release_setup,
    user_with_grants,
)


def _editor(w):
    """May edit drafts of the agent, not publish anywhere."""
    editor = user_with_grants("editor")
    grant(editor, RoleFactory(name="editor", capabilities=["view_config", "edit_drafts"]), w.agent)
    return editor


def no_right(w):
    return SimpleNamespace(version=w.strategy[2], environment=w.envs["sg-test"], actor=_editor(w))


def no_right_and_runtime_lacks(w):
    return SimpleNamespace(version=w.strategy[3], environment=w.envs["bank-uat"], actor=_editor(w))


def protected(w):
    return SimpleNamespace(version=w.strategy[2], environment=w.envs["prod"], actor=w.ops)


def sensitive_section(w):
    # Frozen by an admin (who may switch state_of_mind on); ops may not publish it.
    profile = w.profile[1].document
    version = frozen_version(profile, profile_body(state_of_mind=True), actor=w.admin)
    return SimpleNamespace(version=version, environment=w.envs["sg-test"], actor=w.ops)


def approval_waiting(w):
    release_publish(version=w.strategy[2], environment=w.envs["prod"], actor=w.ops)
    return SimpleNamespace(version=w.strategy[1], environment=w.envs["prod"], actor=w.ops2)


def runtime_lacks_a_handler(w):
    # v3 falls back to general_policy_only, which bank-uat's runtime does not implement.
    return SimpleNamespace(version=w.strategy[3], environment=w.envs["bank-uat"], actor=w.ops)


def archived_environment(w):
    old = EnvironmentFactory(key="old-uat", position=4, manifest=manifest_body())
    old = environment_archive(environment=old, actor=w.admin, reason="decommissioned")
    return SimpleNamespace(version=w.strategy[2], environment=old, actor=w.ops)


def no_manifest_yet(w):
    fresh = EnvironmentFactory(key="eu-test", position=5)
    return SimpleNamespace(version=w.strategy[2], environment=fresh, actor=w.ops)


CASES = [
    # (setup, the judgement's codes, what the publish raises (status, code) or None, plan action)
    (no_right, ["forbidden"], (403, "forbidden"), "skip"),
    (
        no_right_and_runtime_lacks,
        ["forbidden", "unknown_handler"],
        (403, "forbidden"),
        "skip",
    ),
    (protected, ["approval_required"], None, "request"),
    (sensitive_section, ["sensitive_section"], (403, "sensitive_section"), "skip"),
    (
        approval_waiting,
        ["approval_pending", "approval_required"],
        (409, "approval_pending"),
        "skip",
    ),
    (runtime_lacks_a_handler, ["unknown_handler"], (400, "not_publishable"), "publish"),
    (archived_environment, ["environment_archived"], (400, "not_publishable"), "publish"),
    (no_manifest_yet, ["no_manifest"], (400, "not_publishable"), "publish"),
]


def _plan_step(w, case):
    """The import's plan for the agent's own file with `case.version` live in the case's
    environment: the plan and that step."""
    data = config_export(agent=w.agent)
    document_key = case.version.document.key
    data["live"].setdefault(case.environment.key, {})[document_key] = case.version.number
    plan = config_plan(config=config_read(data), agent_key=SAMPLE_AGENT, actor=case.actor)
    [step] = [
        r
        for r in plan.releases
        if (r.environment, r.document) == (case.environment.key, document_key)
    ]
    return plan, step


@pytest.mark.parametrize(
    ("setup", "codes", "raises", "action"), CASES, ids=[c[0].__name__ for c in CASES]
)
def test_publish_judgement__same_version__planner_and_publish_give_the_same_findings(
    db, setup, codes, raises, action
):
    # Given a version, an environment and a person for one kind of refusal
    w = release_setup()
    case = setup(w)
    judgement = publish_refusals(
        version=case.version, environment=case.environment, actor=case.actor
    )
    assert [f.code for f in judgement] == codes, judgement

    # When the import plans it, it was decided by the very same findings
    plan, step = _plan_step(w, case)
    assert step.refusals == judgement
    assert step.action == action
    runtime = [f for f in judgement if is_runtime_finding(f)]
    assert [(f["code"], f["message"]) for f in step.findings] == [
        (f.code, f.message) for f in runtime
    ]
    refused = [f for f in judgement if f.severity == "error" and not is_runtime_finding(f)]
    if action == "skip":  # the reason is the judgement's words
        assert all(f.message in step.reason for f in refused if f.code == refused[0].code)
    if action == "request":
        assert step.reason == judgement[-1].message
    if action == "publish":  # the runtime's findings stop the import, named by environment
        assert [(e["code"], e["message"]) for e in plan.errors if e.get("environment")] == [
            (f.code, f"{case.environment.key}: {f.message}") for f in runtime
        ]

    # And the publish raises from the same findings, as it always has
    if raises is None:
        outcome = release_publish(
            version=case.version, environment=case.environment, actor=case.actor
        )
        assert outcome.release is None and outcome.approval.version == case.version
        return
    with pytest.raises(ApplicationError) as error:
        release_publish(version=case.version, environment=case.environment, actor=case.actor)
    assert (error.value.status, error.value.code) == raises
    first = judgement[0]
    if raises[1] == "not_publishable":
        assert error.value.details == [f.as_dict() for f in runtime]
        assert all(f.message in error.value.message for f in runtime)
    elif raises[1] == "sensitive_section":
        assert error.value.details == [f.as_dict() for f in judgement]
        assert "state_of_mind" in error.value.message
    else:
        assert error.value.message == first.message


def test_publish_judgement__sensitive_wording__one_for_saving_publishing_and_the_plan(db):
    # Given ops, who may not switch state_of_mind on, and an import adding a version with it
    w = release_setup()
    data = config_export(agent=w.agent)
    profile = next(d for d in data["documents"] if d["key"] == "profile")
    profile["versions"].append({"number": 2, "note": "", "body": profile_body(state_of_mind=True)})
    plan = config_plan(config=config_read(data), agent_key=SAMPLE_AGENT, actor=w.ops)
    [planned] = [e for e in plan.errors if e["code"] == "sensitive_section"]
    # When ops saves the same body as a draft
    from strategies.documents.services import draft_create

    with pytest.raises(ApplicationError) as saving:
        draft_create(
            document=w.profile[1].document, body=profile_body(state_of_mind=True), actor=w.ops
        )
    # Then the plan's finding is the refusal's, at the file's place
    [detail] = saving.value.details
    assert planned["message"] == detail["message"]
    assert planned["path"] == f"documents[0].versions[1].body.{detail['path']}"
    assert STRATEGY_KEY not in planned["path"]
