"""The runtime contract's examples (contract/*.json), answered by the SDK's fake console: the
console's tests/integration/test_runtime_contract_examples.py runs the same files against
the real console, so what the SDK's I/O tests lean on is what a runtime meets."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest
from contract_examples import Answer, example_names, run_example
from fake_console import ENVIRONMENT, PAYLOAD, TOKEN


@pytest.mark.parametrize("example", example_names())
def test_contract_example__fake_console__answers_as_the_example_says(console, example):
    def send(method, path, headers, body):
        request = urllib.request.Request(  # noqa: S310 (loopback)
            console.url + path, data=body or None, headers=dict(headers), method=method
        )
        try:
            with urllib.request.urlopen(request, timeout=2) as answer:  # noqa: S310 (loopback)
                return Answer(answer.status, _lower(answer.headers), answer.read())
        except urllib.error.HTTPError as error:
            return Answer(error.code, _lower(error.headers), error.read())

    variables = {
        "token": TOKEN,
        "environment": ENVIRONMENT,
        "profile_version": PAYLOAD["profile"]["version"],
    }
    run_example(example, send, variables)


def _lower(headers) -> dict[str, str]:
    return {name.lower(): value for name, value in headers.items()}
