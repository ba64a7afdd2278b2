"""Demo agents, environments, manifests and documents (DEMO.md). Idempotent."""

from __future__ import annotations

import copy

from context_runtime import documents, vocabulary

from console.demo.data import BANK_PROFILE, DEMO_MANIFEST
from strategies.catalog.models import Agent, Environment
from strategies.catalog.services import manifest_record
from strategies.documents import services
from strategies.documents.models import Document

AGENTS = [
    (
        "assistant_professional",
        "Assistant Professional",
        "Answers the bank's customers on orders, deliveries and policies.",
    ),
    ("assistant_lite", "Assistant Lite", "A lighter assistant: profile and topic only."),
]
# key, name, position, protected
ENVIRONMENTS = [
    ("sg-test", "SG test", 1, False),
    ("bank-uat", "Bank UAT", 2, False),
    ("prod", "Production", 3, True),
]


def manifest_body(environment_key: str) -> dict:
    body = copy.deepcopy(DEMO_MANIFEST)
    if environment_key == "bank-uat":
        body["handlers"] = []  # bank-uat's runtime does not implement general_policy_only yet
    return body


DEMO_AUTHOR = "ops"
STRATEGY_KEY = "after_sales_consultation"

# after_sales_consultation v1–v3 (DEMO.md); v3 is the example of docs/background.md §
# Strategies per task, normalised.
STRATEGY_VERSIONS: list[tuple[dict, str]] = [
    (
        {
            "required": ["task_state", "order_delivery"],
            "optional": [],
            "allowed_tools": ["lookup_order"],
            "max_extra_reads": 1,
            "budget": {"max_input_tokens": 6000, "reserve_output_tokens": 800},
            "history": {"max_turns": 10, "compress_after_tokens": 3000},
        },
        "First cut: task state and the order.",
    ),
    (
        {
            "required": ["task_state", "order_delivery"],
            "optional": ["applicable_policy"],
            "allowed_tools": ["lookup_order", "search_policy"],
            "max_extra_reads": 1,
            "budget": {"max_input_tokens": 6000, "reserve_output_tokens": 800},
            "history": {"max_turns": 10, "compress_after_tokens": 3000},
        },
        "Add the applicable policy when there is room.",
    ),
    (
        {
            **documents.normalize_legacy_strategy(
                {
                    "name": STRATEGY_KEY,
                    "version": 3,
                    "required": ["task_state", "order_delivery", "applicable_policy"],
                    "optional": ["recent_dialogue"],
                    "allowed_tools": ["lookup_order", "search_policy"],
                    "on_missing_order": "general_policy_only",
                    "max_extra_reads": 2,
                }
            ),
            "budget": {"max_input_tokens": 8000, "reserve_output_tokens": 1000},
            "history": {"max_turns": 10, "compress_after_tokens": 3000},
        },
        "Policy required; without the order, answer from the general policy only.",
    ),
]

# assistant_lite: the plain profile, no memories or personal sections.
LITE_ON = {"high_level_profile", "communication_style", "time_summary", "chat_topic"}
LITE_PROFILE: dict = {
    "sections": {
        block: {key: key in LITE_ON for key in vocabulary.KNOWN_SECTIONS[block]}
        for block in vocabulary.BLOCKS
    },
    "switches": {
        "temporalAnchor.enabled": False,
        "toolPrefilter.enabled": True,
        "queryRelatedContextInjectorMode": "default",
        "enableQueryRelatedContext": False,
    },
}


def _frozen_versions(document: Document, versions: list[tuple[dict, str]]) -> None:
    """Create and freeze each version through the services, once (idempotent)."""
    if document.versions.exists():
        return
    for body, note in versions:
        draft = services.draft_create(
            document=document, body=body, actor=None, note=note, author_label=DEMO_AUTHOR
        )
        services.version_freeze(draft=draft, actor=None)


def load(stdout=None) -> None:
    for key, name, description in AGENTS:
        Agent.objects.get_or_create(key=key, defaults={"name": name, "description": description})
    for key, name, position, protected in ENVIRONMENTS:
        env, _ = Environment.objects.get_or_create(
            key=key, defaults={"name": name, "position": position, "protected": protected}
        )
        latest = env.manifests.order_by("-version").first()
        # The demo's own report is brought up to date (a demo loaded before the manifest
        # declared shadow support gets it; an identical body records nothing); a manifest a
        # real runtime reported is left alone.
        if latest is None or latest.reported_by == "demo":
            manifest_record(
                environment=env,
                body=manifest_body(key),
                runtime="bank-assistant 2026.11.3",
                reported_by="demo",
            )
    for agent in Agent.objects.all():
        Document.objects.get_or_create(
            agent=agent,
            key=Document.PROFILE_KEY,
            defaults={"kind": Document.Kind.PROFILE, "name": "Context profile"},
        )
    professional = Agent.objects.get(key="assistant_professional")
    lite = Agent.objects.get(key="assistant_lite")
    _frozen_versions(
        Document.objects.get(agent=professional, key=Document.PROFILE_KEY),
        [(copy.deepcopy(BANK_PROFILE), "Bank profile: memories on, personal sections off.")],
    )
    _frozen_versions(
        Document.objects.get(agent=lite, key=Document.PROFILE_KEY),
        [(copy.deepcopy(LITE_PROFILE), "Lite: profile and topic only.")],
    )
    strategy, _ = Document.objects.get_or_create(
        agent=professional,
        key=STRATEGY_KEY,
        defaults={"kind": Document.Kind.STRATEGY, "name": "After-sales consultation"},
    )
    _frozen_versions(strategy, STRATEGY_VERSIONS)
