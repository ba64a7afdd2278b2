"""The runtime contract's examples (sdk/tests/contract/*.json, docs/runtime-contract.md),
answered by the real console. The SDK's fake console answers the same files
(sdk/tests/test_contract_examples.py), so neither can drift from the contract unnoticed."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from strategies.releases.services import release_publish
from tests.factories import release_setup, runtime_token

SDK_TESTS = Path(__file__).resolve().parents[2] / "sdk" / "tests"

# The runner lives with the fixtures in the SDK's tests (which cannot import the console).
_spec = importlib.util.spec_from_file_location(
    "contract_examples", SDK_TESTS / "contract_examples.py"
)
contract_examples = importlib.util.module_from_spec(_spec)
sys.modules["contract_examples"] = contract_examples  # dataclasses look their module up
_spec.loader.exec_module(contract_examples)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def sg_test_token():
    """sg-test serves assistant_professional's profile v1 and after_sales_consultation v3."""
    world = release_setup()
    sg_test = world.envs["sg-test"]
    release_publish(version=world.profile[1], environment=sg_test, actor=world.ops)
    release_publish(version=world.strategy[3], environment=sg_test, actor=world.ops)
    return runtime_token(sg_test)


@pytest.mark.parametrize("example", contract_examples.example_names())
def test_contract_example__real_console__answers_as_the_example_says(
    client, sg_test_token, example
):
    def send(method, path, headers, body):
        extra = {
            "HTTP_" + name.upper().replace("-", "_"): value
            for name, value in headers.items()
            if name.lower() != "content-type"
        }
        content_type = headers.get("Content-Type", "application/json")
        response = client.generic(method, path, data=body, content_type=content_type, **extra)
        return contract_examples.Answer(
            status=response.status_code,
            headers={name.lower(): value for name, value in response.headers.items()},
            body=response.content,
        )

    variables = {"token": sg_test_token, "environment": "sg-test", "profile_version": 1}
    contract_examples.run_example(example, send, variables)


def test_contract_examples__all_six_files_found():
    # An empty parametrization would pass unnoticed: a path that moved must fail here.
    assert contract_examples.example_names() == [
        "config",
        "config_not_modified",
        "config_refused",
        "traces_batch",
        "traces_batch_refused",
        "traces_rejected_one_by_one",
    ]
