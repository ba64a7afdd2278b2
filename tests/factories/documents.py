"""Agents, environments with what their runtime implements, documents and versions.

Bodies are built here, small and explicit: `manifest_body`, `strategy_body`, `profile_body`.
Rows for tests that only read are written directly by the factories; versions a test needs
frozen go through the services (`frozen_version`, `frozen_versions`), as do manifests
(`EnvironmentFactory(manifest=...)` records through `manifest_record`).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from datetime import UTC

import factory
from context_runtime import canonical
from context_runtime.vocabulary import BLOCKS, KNOWN_SECTIONS, KNOWN_SENSITIVE_SECTIONS

from strategies.catalog.models import Agent, Environment, Manifest
from strategies.catalog.services import manifest_record
from strategies.documents.models import Document, Version
from strategies.documents.services import draft_create, draft_update, version_freeze

# The agent the access tests act on, and another one to be out of scope on.
SAMPLE_AGENT = "assistant_professional"
OTHER_AGENT = "assistant_lite"
STRATEGY_KEY = "after_sales_consultation"

# --- bodies --------------------------------------------------------------------------------------
PROVIDERS = ("task_state", "order_delivery", "applicable_policy", "recent_dialogue")
TOOLS = ("lookup_order", "search_policy")
HANDLERS = ("general_policy_only",)
SWITCH_DEFAULTS: dict[str, object] = {
    "temporalAnchor.enabled": False,
    "temporalAnchor.agentWhitelist": [],
    "toolPrefilter.enabled": False,
    "queryRelatedContextInjectorMode": "default",
    "enableQueryRelatedContext": True,
    "historyCompression.enabled": True,
}


def manifest_body(
    *,
    providers: Iterable[str] = PROVIDERS,
    tools: Iterable[str] = TOOLS,
    handlers: Iterable[str] = HANDLERS,
    sections: Iterable[str] | None = None,
    not_sensitive: Iterable[str] = (),
    switches: Iterable[str] | None = None,
    features: Iterable[str] = (),
) -> dict:
    """What a runtime reports it implements (docs/runtime-contract.md §2). By default:
    the providers, tools and handler the strategies of these tests use, every known section
    (marked sensitive as the console knows it, except those in `not_sensitive`) and every
    known switch."""
    keys = set(sections) if sections is not None else None
    harmless = set(not_sensitive)
    return {
        "providers": list(providers),
        "tools": list(tools),
        "handlers": list(handlers),
        "sections": [
            {
                "key": key,
                "block": block,
                "sensitive": key in KNOWN_SENSITIVE_SECTIONS and key not in harmless,
            }
            for block in BLOCKS
            for key in KNOWN_SECTIONS[block]
            if keys is None or key in keys
        ],
        "switches": list(switches if switches is not None else SWITCH_DEFAULTS),
        # What the runtime declares beyond serving live (`shadow`); none unless asked.
        **({"features": list(features)} if features else {}),
    }


STRATEGY_BODY = {
    "required": ["task_state", "order_delivery"],
    "optional": ["applicable_policy"],
    "allowed_tools": ["lookup_order"],
    "max_extra_reads": 1,
    "budget": {"max_input_tokens": 6000, "reserve_output_tokens": 800},
}


def strategy_body(**changes) -> dict:
    """A valid strategy: task state and the order required, the policy when there is room;
    each keyword replaces one top-level field."""
    body = copy.deepcopy(STRATEGY_BODY)
    body.update(copy.deepcopy(changes))
    return body


def strategy_bodies_v1_to_v3() -> list[dict]:
    """One strategy as it grows: v1 task state and the order; v2 adds the applicable policy
    as optional; v3 requires the policy, reads more and, without the order, falls back to
    the general_policy_only handler — which a runtime must implement to serve it."""
    return [
        strategy_body(optional=[]),
        strategy_body(),
        strategy_body(
            required=["task_state", "order_delivery", "applicable_policy"],
            optional=["recent_dialogue"],
            allowed_tools=["lookup_order", "search_policy"],
            on_missing={"order_delivery": "general_policy_only"},
            max_extra_reads=2,
            budget={"max_input_tokens": 8000, "reserve_output_tokens": 1000},
        ),
    ]


def profile_body(*, switches: dict | None = None, **sections: bool) -> dict:
    """A profile: every known section, the ordinary ones on and the sensitive ones off, every
    switch at SWITCH_DEFAULTS; each keyword turns one section on or off
    (profile_body(state_of_mind=True)), `switches` overrides switch values."""
    body = {
        "sections": {
            block: {key: key not in KNOWN_SENSITIVE_SECTIONS for key in KNOWN_SECTIONS[block]}
            for block in BLOCKS
        },
        "switches": {**copy.deepcopy(SWITCH_DEFAULTS), **(switches or {})},
    }
    for key, on in sections.items():
        [block] = [b for b in BLOCKS if key in KNOWN_SECTIONS[b]]  # a typo fails here
        body["sections"][block][key] = on
    return body


# --- rows ------------------------------------------------------------------------------------------
class AgentFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Agent
        django_get_or_create = ("key",)

    key = factory.Sequence(lambda n: f"agent_{n}")
    name = factory.LazyAttribute(lambda o: o.key.replace("_", " ").title())


class EnvironmentFactory(factory.django.DjangoModelFactory):
    """An environment; `manifest=<body>` records what its runtime implements through
    `manifest_record` (without it, the runtime has not reported yet)."""

    class Meta:
        model = Environment
        django_get_or_create = ("key",)
        skip_postgeneration_save = True

    key = factory.Sequence(lambda n: f"env-{n}")
    name = factory.LazyAttribute(lambda o: o.key)
    position = factory.Sequence(lambda n: n + 1)
    protected = False

    @factory.post_generation
    def manifest(self, create, extracted, **kwargs):
        if create and extracted is not None:
            manifest_record(
                environment=self, body=extracted, runtime="test-runtime 1.0", reported_by="test"
            )


class ManifestFactory(factory.django.DjangoModelFactory):
    """A manifest row written directly (tests of reads)."""

    class Meta:
        model = Manifest

    environment = factory.SubFactory(EnvironmentFactory)
    version = 1
    runtime = "test-runtime 1.0"
    body = factory.LazyFunction(manifest_body)
    content_hash = factory.LazyAttribute(lambda o: canonical.content_hash(o.body))


class DocumentFactory(factory.django.DjangoModelFactory):
    """A strategy of an agent; `DocumentFactory(profile=True)` is the agent's profile."""

    class Meta:
        model = Document

    agent = factory.SubFactory(AgentFactory)
    kind = Document.Kind.STRATEGY
    key = factory.Sequence(lambda n: f"task_{n}")
    name = factory.LazyAttribute(lambda o: o.key)

    class Params:
        profile = factory.Trait(
            kind=Document.Kind.PROFILE, key=Document.PROFILE_KEY, name="Context profile"
        )


def _default_body(document) -> dict:
    return profile_body() if document.kind == Document.Kind.PROFILE else strategy_body()


class DraftVersionFactory(factory.django.DjangoModelFactory):
    """A draft written directly (tests of reads; edits go through the services)."""

    class Meta:
        model = Version

    document = factory.SubFactory(DocumentFactory)
    number = factory.Sequence(lambda n: n + 1)
    state = Version.State.DRAFT
    body = factory.LazyAttribute(lambda o: _default_body(o.document))
    content_hash = factory.LazyAttribute(lambda o: canonical.content_hash(o.body))
    author_label = "factory"


class FrozenVersionFactory(DraftVersionFactory):
    """A frozen version written directly (tests of reads; freezing goes through the services)."""

    state = Version.State.FROZEN
    frozen_at = factory.Faker("date_time", tzinfo=UTC)


# --- versions through the services ----------------------------------------------------------------
def frozen_version(document: Document, body: dict | None = None, *, actor=None, note: str = ""):
    """Open a draft of `body` and freeze it, the way the editor does; returns the version."""
    body = copy.deepcopy(body) if body is not None else _default_body(document)
    draft = draft_create(document=document, body=body, actor=actor, note=note)
    return version_freeze(draft=draft, actor=actor)


def frozen_versions(document: Document, bodies: Iterable[dict], *, actor=None) -> dict:
    """Freeze each body in turn; returns {number: Version}."""
    versions = [frozen_version(document, body, actor=actor) for body in bodies]
    return {v.number: v for v in versions}


def profile_edit(
    actor, *, toggle: tuple[str, str, bool], note: str = "", agent: str = SAMPLE_AGENT
) -> Version:
    """Edit `agent`'s profile as `actor` the way the editor does (open a draft from the
    latest version, save it, freeze it): one sections toggle (block, section, value).
    Returns the frozen version."""
    document = Document.objects.get(agent__key=agent, key=Document.PROFILE_KEY)
    draft = document.versions.filter(state=Version.State.DRAFT).first()
    if draft is None:
        latest = document.versions.filter(state=Version.State.FROZEN).order_by("-number").first()
        body = copy.deepcopy(latest.body if latest else profile_body())
        draft = draft_create(document=document, body=body, actor=actor, note=note)
    body = copy.deepcopy(draft.body)
    block, section, value = toggle
    body["sections"][block][section] = value
    draft = draft_update(draft=draft, body=body, revision=draft.revision, actor=actor, note=note)
    return version_freeze(draft=draft, actor=actor)
