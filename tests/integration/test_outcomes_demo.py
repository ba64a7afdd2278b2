"""The demo world's outcomes (DEMO.md): every environment declares the four kinds, req-92 …
req-97 end as their story says, a share of the background traffic has outcomes, and loading
again adds nothing."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from console.demo import traffic
from console.kernel.models import AuditRecord
from traces.models import Trace
from traces.outcomes.models import Outcome, OutcomeKind

pytestmark = pytest.mark.django_db


def load_demo() -> str:
    out = io.StringIO()
    call_command("load_demo", "--quiet-logins", stdout=out)
    return out.getvalue()


def values(request_id: str) -> dict:
    return dict(Outcome.objects.filter(request_id=request_id).values_list("kind__key", "value"))


def test_load_demo__kinds_story_and_background_outcomes__second_run_adds_nothing():
    load_demo()

    kinds = set(OutcomeKind.objects.values_list("environment__key", "key", "type"))
    assert kinds == {
        (env, key, kind_type)
        for env in ("sg-test", "bank-uat", "prod")
        for key, kind_type in (
            ("task_completed", "flag"),
            ("escalated", "flag"),
            ("rating", "rating"),
            ("resolution", "label"),
        )
    }
    assert AuditRecord.objects.filter(action="outcome_kind.declare").count() == 12
    # req-97: everything required was selected, and still a person had to refund.
    assert values("req-97") == {
        "task_completed": False,
        "escalated": True,
        "rating": 1,
        "resolution": "refund",
    }
    assert values("req-92") == {
        "task_completed": True,
        "escalated": False,
        "rating": 5,
        "resolution": "explained",
    }
    assert Outcome.objects.get(request_id="req-96", kind__key="escalated").environment.key == "prod"
    background = Trace.objects.filter(request_id__startswith="bg-").count()
    reported = (
        Outcome.objects.filter(request_id__startswith="bg-").values("request_id").distinct().count()
    )
    assert 0.45 * background < reported < 0.75 * background  # traffic.OUTCOME_SHARE of them
    # Not ready more often ends with a person.
    escalated = dict(
        Outcome.objects.filter(request_id__startswith="bg-", kind__key="escalated").values_list(
            "request_id", "value"
        )
    )
    statuses = dict(
        Trace.objects.filter(request_id__in=escalated).values_list("request_id", "status")
    )
    rate = {
        ready: sum(escalated[r] for r in escalated if (statuses[r] == "ready") == ready)
        / sum(1 for r in escalated if (statuses[r] == "ready") == ready)
        for ready in (True, False)
    }
    assert rate[False] > rate[True]

    count = Outcome.objects.count()
    assert "Demo outcomes: 0 kinds declared, 0 outcomes new." in load_demo()
    assert Outcome.objects.count() == count


def test_outcomes_of__deterministic_per_request_id():
    assert traffic.outcomes_of("bg-prod-0007", "ready") == traffic.outcomes_of(
        "bg-prod-0007", "ready"
    )
