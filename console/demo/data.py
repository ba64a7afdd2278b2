"""The demo world's fixed bodies (DEMO.md): the Bank profile (docs/background.md § Context
sections) and a manifest that implements everything the demo uses."""

from __future__ import annotations

from context_runtime.manifest import FEATURES
from context_runtime.vocabulary import (
    BLOCKS,
    KNOWN_SECTIONS,
    KNOWN_SENSITIVE_SECTIONS,
    KNOWN_SWITCHES,
    QUERY_CONTEXT,
    USER_CONTEXT,
)

# The Bank column of docs/background.md § Context sections, with the Bank UAT pipeline switches.
BANK_PROFILE: dict = {
    "sections": {
        USER_CONTEXT: {
            "high_level_profile": True,
            "communication_style": True,
            "real_time_update_from_chat": True,
            "chat_messages_memories": True,
            "memory_retention": True,
            "user_emails": False,
            "personal_particulars": False,
            "state_of_mind": False,
            "dynamic_context": False,
            "explicit_memories": False,
        },
        QUERY_CONTEXT: {
            "time_summary": True,
            "chat_topic": True,
            "predicted_query_memory": True,
            "detailed_profile": True,
            "fact_memory": True,
            "truth": True,
            "contact_list": True,
            "personal_particulars_details": False,
            "state_of_mind_schedule": False,
        },
    },
    "switches": {
        "temporalAnchor.enabled": False,
        "temporalAnchor.agentWhitelist": [],
        "toolPrefilter.enabled": False,
        "queryRelatedContextInjectorMode": "default",
        "enableQueryRelatedContext": True,
        "historyCompression.enabled": True,
    },
}

# A manifest in the wire form of docs/runtime-contract.md §2 that implements everything the demo uses.
DEMO_MANIFEST: dict = {
    "providers": [
        "task_state",
        "order_delivery",
        "applicable_policy",
        "recent_dialogue",
        "memory",
        "knowledge",
    ],
    "tools": ["lookup_order", "search_policy"],
    "handlers": ["general_policy_only"],
    "sections": [
        {"key": key, "block": block, "sensitive": key in KNOWN_SENSITIVE_SECTIONS}
        for block in BLOCKS
        for key in KNOWN_SECTIONS[block]
    ],
    "switches": list(KNOWN_SWITCHES),
    # The demo runtimes are built on the SDK, which runs shadow releases.
    "features": list(FEATURES),
}
