"""The go-live judgement's change-record rows (docs/change-approvals.md): where an environment
requires an external change record, the publish, an approval's decision and a rollout's start
need an approved, unexpired one of the same content; the rollout's later moves and every
rollback never ask; an environment that does not require one never asks."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from strategies.releases.models import ChangeRecord, ChangeSystem
from strategies.releases.selectors.golive import RULES, Candidate, Path, go_live_refusals
from strategies.releases.selectors.refusals import CHANGE_RECORD_REQUIRED
from tests.factories import release_setup

pytestmark = pytest.mark.django_db

ASKS = {Path.PUBLISH, Path.APPROVAL, Path.ROLLOUT_START}


@pytest.fixture
def world():
    w = release_setup()
    w.env = w.envs["sg-test"]
    ChangeSystem.objects.create(
        environment=w.env,
        url="https://changes.example.com/",
        secret="s",
        requires_change_record=True,
    )
    return w


def codes(w, path, version) -> set[str]:
    findings = go_live_refusals(
        path, Candidate.of(version), environment=w.env, actor=w.admin, live=None
    )
    return {f.code for f in findings if f.severity == "error"}


def record(w, version, *, state=ChangeRecord.State.APPROVED, hours=1):
    return ChangeRecord.objects.create(
        environment=w.env,
        document=version.document,
        version=version,
        content_hash=version.content_hash,
        state=state,
        valid_until=timezone.now() + timedelta(hours=hours),
    )


def test_rules__which_paths_ask_for_a_change_record():
    assert {path for path, rules in RULES.items() if rules.change_record} == ASKS
    for path in (Path.ROLLBACK, Path.GUARD_ROLLBACK):
        assert "change record" in RULES[path].why


@pytest.mark.parametrize("path", list(Path))
def test_judgement__required_and_none_approved__only_the_asking_paths_refuse(world, path):
    refused = CHANGE_RECORD_REQUIRED in codes(world, path, world.strategy[2])
    assert refused == (path in ASKS)


@pytest.mark.parametrize("path", sorted(ASKS))
def test_judgement__approved_unexpired_same_content__passes(world, path):
    record(world, world.strategy[2])
    assert CHANGE_RECORD_REQUIRED not in codes(world, path, world.strategy[2])


@pytest.mark.parametrize(
    "state, hours",
    [
        (ChangeRecord.State.WAITING, 1),
        (ChangeRecord.State.REJECTED, 1),
        (ChangeRecord.State.EXPIRED, 1),
        (ChangeRecord.State.APPROVED, -1),  # approved, its window over
    ],
)
def test_judgement__not_approved_or_expired__refuses(world, state, hours):
    record(world, world.strategy[2], state=state, hours=hours)
    assert CHANGE_RECORD_REQUIRED in codes(world, Path.PUBLISH, world.strategy[2])


def test_judgement__approved_for_another_content__refuses(world):
    record(world, world.strategy[1])
    assert CHANGE_RECORD_REQUIRED in codes(world, Path.PUBLISH, world.strategy[2])


def test_judgement__not_required__never_asks(world):
    ChangeSystem.objects.filter(environment=world.env).update(requires_change_record=False)
    world.env = type(world.env).objects.get(pk=world.env.pk)  # forget the cached system
    assert CHANGE_RECORD_REQUIRED not in codes(world, Path.PUBLISH, world.strategy[2])
