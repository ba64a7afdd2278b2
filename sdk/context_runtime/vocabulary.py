"""The document vocabulary of the contract (docs/runtime-contract.md §5): kinds, blocks,
the contextSections and pipeline switches (docs/background.md § Context sections, § Pipeline
switches), the fields of each body and their limits."""

from __future__ import annotations

__all__ = [
    "AGENT_WHITELIST_SWITCH",
    "BLOCKS",
    "BLOCK_LABELS",
    "BUDGET_FIELDS",
    "HISTORY_FIELDS",
    "KINDS",
    "KNOWN_SECTIONS",
    "KNOWN_SENSITIVE_SECTIONS",
    "KNOWN_SWITCHES",
    "LEGACY_ON_MISSING_ORDER",
    "LEGACY_ORDER_SOURCE",
    "MAX_BODY_BYTES",
    "MAX_EXTRA_READS",
    "MAX_HISTORY_TURNS",
    "MAX_INPUT_TOKENS",
    "MAX_PRIORITY",
    "PROFILE",
    "PROFILE_FIELDS",
    "QUERY_CONTEXT",
    "SNAPSHOT_FIELDS",
    "STRATEGY",
    "STRATEGY_FIELDS",
    "USER_CONTEXT",
]

STRATEGY = "strategy"
PROFILE = "profile"
KINDS = (STRATEGY, PROFILE)

MAX_BODY_BYTES = 64 * 1024

USER_CONTEXT = "user_context"
QUERY_CONTEXT = "query_context"
BLOCKS = (USER_CONTEXT, QUERY_CONTEXT)
BLOCK_LABELS = {USER_CONTEXT: "user context", QUERY_CONTEXT: "query context"}

# docs/background.md § Context sections: the contextSections of assistant_professional, in order.
KNOWN_SECTIONS: dict[str, tuple[str, ...]] = {
    USER_CONTEXT: (
        "high_level_profile",
        "communication_style",
        "real_time_update_from_chat",
        "chat_messages_memories",
        "memory_retention",
        "user_emails",
        "personal_particulars",
        "state_of_mind",
        "dynamic_context",
        "explicit_memories",
    ),
    QUERY_CONTEXT: (
        "time_summary",
        "chat_topic",
        "predicted_query_memory",
        "detailed_profile",
        "fact_memory",
        "truth",
        "contact_list",
        "personal_particulars_details",
        "state_of_mind_schedule",
    ),
}

# Sections about a person's identity or mental state.  Used when no manifest says otherwise,
# so that switching one on is never waved through just because a runtime has not reported yet.
KNOWN_SENSITIVE_SECTIONS = frozenset(
    {
        "user_emails",
        "personal_particulars",
        "personal_particulars_details",
        "state_of_mind",
        "state_of_mind_schedule",
    }
)

# Pipeline switches (docs/background.md § Pipeline switches) and the value each takes: ``bool``,
# ``list`` (of strings) or a tuple of allowed strings.
KNOWN_SWITCHES: dict[str, object] = {
    "temporalAnchor.enabled": bool,
    "temporalAnchor.agentWhitelist": list,
    "toolPrefilter.enabled": bool,
    "queryRelatedContextInjectorMode": ("default", "persistent_injection"),
    "enableQueryRelatedContext": bool,
    "historyCompression.enabled": bool,
}
AGENT_WHITELIST_SWITCH = "temporalAnchor.agentWhitelist"

# Top-level fields in the order of the docs/runtime-contract.md §5 tables; findings follow this order.
STRATEGY_FIELDS = (
    "required",
    "optional",
    "priority",
    "bundles",
    "depends_on",
    "allowed_tools",
    "on_missing",
    "max_extra_reads",
    "budget",
    "history",
    "snapshot",
)
PROFILE_FIELDS = ("sections", "switches")
BUDGET_FIELDS = ("max_input_tokens", "reserve_output_tokens")
HISTORY_FIELDS = ("max_turns", "compress_after_tokens")
SNAPSHOT_FIELDS = ("allowed",)

MAX_INPUT_TOKENS = 2_000_000
MAX_EXTRA_READS = 10
MAX_PRIORITY = 100
MAX_HISTORY_TURNS = 200

# The chapter's example (docs/background.md § Strategies per task) wrote the fallback for a
# missing order as a top-level field.
LEGACY_ON_MISSING_ORDER = "on_missing_order"
LEGACY_ORDER_SOURCE = "order_delivery"
