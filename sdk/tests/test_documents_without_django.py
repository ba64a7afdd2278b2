"""The package stands alone: with only `sdk/` installed (no Django), a runtime imports it and
validates the demo world's strategy and profile bodies with the console's own validator."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import context_runtime
from context_runtime import documents
from context_runtime.findings import blocking
from context_runtime.manifest import Manifest
from context_runtime.vocabulary import (
    KNOWN_SECTIONS,
    KNOWN_SENSITIVE_SECTIONS,
    KNOWN_SWITCHES,
    PROFILE,
    QUERY_CONTEXT,
    STRATEGY,
    USER_CONTEXT,
)

# The example of docs/background.md § Strategies per task as the chapter writes it (legacy
# on_missing_order), with the demo budget.
CONSULTATION_V3 = {
    "name": "after_sales_consultation",
    "version": 3,
    "required": ["task_state", "order_delivery", "applicable_policy"],
    "optional": ["recent_dialogue"],
    "allowed_tools": ["lookup_order", "search_policy"],
    "on_missing_order": "general_policy_only",
    "max_extra_reads": 2,
    "budget": {"max_input_tokens": 8000, "reserve_output_tokens": 1000},
}
BANK_ON = {
    "high_level_profile", "communication_style", "real_time_update_from_chat",
    "chat_messages_memories", "memory_retention", "time_summary", "chat_topic",
    "predicted_query_memory", "detailed_profile", "fact_memory", "truth", "contact_list",
}  # fmt: skip
BANK_PROFILE = {
    "sections": {
        block: {key: key in BANK_ON for key in KNOWN_SECTIONS[block]}
        for block in (USER_CONTEXT, QUERY_CONTEXT)
    },
    "switches": {
        "temporalAnchor.enabled": False,
        "temporalAnchor.agentWhitelist": [],
        "toolPrefilter.enabled": False,
        "queryRelatedContextInjectorMode": "default",
        "enableQueryRelatedContext": True,
    },
}
DEMO_MANIFEST = Manifest.from_dict(
    {
        "providers": ["task_state", "order_delivery", "applicable_policy", "recent_dialogue"],
        "tools": ["lookup_order", "search_policy"],
        "handlers": ["general_policy_only"],
        "sections": [
            {"key": key, "block": block, "sensitive": key in KNOWN_SENSITIVE_SECTIONS}
            for block, keys in KNOWN_SECTIONS.items()
            for key in keys
        ],
        "switches": list(KNOWN_SWITCHES),
    },
    name="sg-test",
)


def test_package__django_made_unimportable__every_module_still_imports():
    # In a fresh interpreter where `import django` (and DRF, Celery, psycopg, redis) fails.
    blocked = ["django", "rest_framework", "celery", "psycopg", "redis"]
    modules = sorted(
        info.name
        for info in pkgutil.walk_packages(context_runtime.__path__, "context_runtime.")
        if ".adk" not in info.name  # the ADK integration needs its optional extra
    )
    code = (
        "import sys\n"
        + "".join(f"sys.modules[{name!r}] = None\n" for name in blocked)
        + "".join(f"import {module}\n" for module in modules)
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert len(modules) > 8


def test_validator__demo_strategy_and_profile__valid_against_the_demo_manifest():
    strategy = documents.normalize_legacy_strategy(CONSULTATION_V3)
    assert strategy["on_missing"] == {"order_delivery": "general_policy_only"}
    assert documents.validate_document(STRATEGY, strategy, DEMO_MANIFEST) == []
    assert blocking(documents.validate_document(PROFILE, BANK_PROFILE, DEMO_MANIFEST)) == []


def test_validator__runtime_without_the_handler__names_the_missing_handler():
    manifest = Manifest(
        providers=DEMO_MANIFEST.providers,
        tools=DEMO_MANIFEST.tools,
        handlers=frozenset(),
        sections=DEMO_MANIFEST.sections,
        switches=DEMO_MANIFEST.switches,
        name="bank-uat",
    )
    strategy = documents.normalize_legacy_strategy(CONSULTATION_V3)
    (finding,) = documents.validate_document(STRATEGY, strategy, manifest)
    assert finding.path == "on_missing.order_delivery"
    assert "general_policy_only" in finding.message and "bank-uat" in finding.message
