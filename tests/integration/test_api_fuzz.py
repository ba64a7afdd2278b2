"""An independent fuzzer against the published contract: Schemathesis generates requests for
every operation of /api/schema/ on a live console — the operator operations as an admin of
all agents (session cookie and CSRF token), the runtime operations (/api/v1/runtime/) with
an sg-test token holding every capability, SCIM's (/scim/v2/) with a SCIM token — and checks each response: never a server error,
a status code the schema documents, a body that matches the schema documented for it."""

from __future__ import annotations

import os
import secrets
from collections import Counter

import pytest
import requests
import schemathesis
from django.conf import settings as django_settings
from django.test import Client
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import (
    response_schema_conformance,
    status_code_conformance,
)

from console.accounts.scim import scim_token_create
from tests.integration.test_bad_input import callers  # noqa: F401  (the world, as a fixture)

pytestmark = [pytest.mark.fuzz, pytest.mark.django_db(transaction=True)]

EXAMPLES_PER_OPERATION = int(
    os.environ.get("FUZZ_EXAMPLES", "45")
)  # × 26 operations: ≥ 1,000 generated cases
MIN_CASES = 1_000
RUNTIME_PREFIX = "/api/v1/runtime/"
SCIM_PREFIX = "/scim/v2/"
CHECKS = [not_a_server_error, response_schema_conformance, status_code_conformance]


def _operator_session(admin, base_url: str) -> requests.Session:
    """A requests session signed in as `admin`: Django's session cookie and a CSRF token
    (cookie and header), as the browser holds them for the API's unsafe methods."""
    client = Client()
    client.force_login(admin)
    session = requests.Session()
    csrf = secrets.token_hex(16)  # 32 characters: an unmasked CSRF secret
    sessionid = client.cookies[django_settings.SESSION_COOKIE_NAME].value
    # A Cookie header rather than the cookie jar: the jar keeps no cookie for "localhost".
    session.headers["Cookie"] = (
        f"{django_settings.SESSION_COOKIE_NAME}={sessionid}; "
        f"{django_settings.CSRF_COOKIE_NAME}={csrf}"
    )
    session.headers["X-CSRFToken"] = csrf
    session.headers["Referer"] = base_url + "/"
    return session


def test_schemathesis_finds_nothing(live_server, callers):  # noqa: F811
    admin, token = callers
    base_url = live_server.url
    operator = _operator_session(admin, base_url)
    runtime = requests.Session()
    runtime.headers["Authorization"] = f"Bearer {token}"
    scim = requests.Session()  # SCIM (issue 33) with its own token, one provider's
    scim.headers["Authorization"] = (
        f"Bearer {scim_token_create(actor=admin, provider='bank', name='fuzz')[1]}"
    )

    schema = schemathesis.openapi.from_url(
        f"{base_url}/api/schema/?format=json", headers={"Cookie": operator.headers["Cookie"]}
    )
    # The cases carry the sessions' real credentials, not generated ones: a made-up bearer
    # token only ever meets the 401 (documented on every operation), and nothing behind it.
    schema.config.generation.update(with_security_parameters=False)
    cases: Counter[str] = Counter()
    failures: dict[str, dict[str, str]] = {}

    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 20, [op.label for op in operations]
    for operation in operations:
        session = runtime if operation.path.startswith(RUNTIME_PREFIX) else operator
        session = scim if operation.path.startswith(SCIM_PREFIX) else session
        _fuzz(operation, base_url, session, cases, failures)

    total = sum(cases.values())
    print(f"schemathesis: {total} generated cases over {len(operations)} operations")
    report = "\n".join(
        f"{label} — {title}: {detail}"
        for label, found in failures.items()
        for title, detail in found.items()
    )
    assert not failures, f"{len(failures)} operations failed ({total} cases):\n{report}"
    assert total >= MIN_CASES, cases


def _fuzz(operation, base_url, session, cases, failures) -> None:
    """Up to EXAMPLES_PER_OPERATION generated cases of one operation; failures are collected
    (three per operation at most) rather than raised, so one run reports every operation."""

    @settings(
        max_examples=EXAMPLES_PER_OPERATION,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy())
    def run(case):
        cases[operation.label] += 1
        try:
            case.call_and_validate(base_url=base_url, session=session, checks=CHECKS)
        except (Exception, FailureGroup) as error:  # every failure is collected and reported
            found = failures.setdefault(operation.label, {})
            for failure in getattr(error, "exceptions", [error]):
                title = getattr(failure, "title", type(failure).__name__)
                if title not in found:
                    message = " ".join(str(failure).split())[:400]
                    found[title] = f"{message}\n      {case.as_curl_command()[:400]}"

    run()
