"""Factories for agents, environments, manifests, documents and versions (factory_boy)."""

from __future__ import annotations

import copy
from datetime import UTC

import factory
from context_runtime import canonical

from console.demo import data
from strategies.catalog.models import Agent, Environment, Manifest
from strategies.documents.models import Document, Version

STRATEGY_BODY = {
    "required": ["task_state", "order_delivery"],
    "optional": ["applicable_policy"],
    "allowed_tools": ["lookup_order"],
    "max_extra_reads": 1,
    "budget": {"max_input_tokens": 6000, "reserve_output_tokens": 800},
}


def strategy_body(**changes) -> dict:
    body = copy.deepcopy(STRATEGY_BODY)
    body.update(changes)
    return body


class AgentFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Agent
        django_get_or_create = ("key",)

    key = factory.Sequence(lambda n: f"agent_{n}")
    name = factory.LazyAttribute(lambda o: o.key.replace("_", " ").title())


class EnvironmentFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Environment
        django_get_or_create = ("key",)

    key = factory.Sequence(lambda n: f"env-{n}")
    name = factory.LazyAttribute(lambda o: o.key)
    position = factory.Sequence(lambda n: n + 1)


class ManifestFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Manifest

    environment = factory.SubFactory(EnvironmentFactory)
    version = 1
    runtime = "test-runtime 1.0"
    body = factory.LazyFunction(lambda: copy.deepcopy(data.DEMO_MANIFEST))
    content_hash = factory.LazyAttribute(lambda o: canonical.content_hash(o.body))


class DocumentFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Document

    agent = factory.SubFactory(AgentFactory)
    kind = Document.Kind.STRATEGY
    key = factory.Sequence(lambda n: f"task_{n}")


class FrozenVersionFactory(factory.django.DjangoModelFactory):
    """A frozen version written directly (tests of reads; writes go through services)."""

    class Meta:
        model = Version

    document = factory.SubFactory(DocumentFactory)
    number = factory.Sequence(lambda n: n + 1)
    state = Version.State.FROZEN
    body = factory.LazyFunction(lambda: copy.deepcopy(STRATEGY_BODY))
    content_hash = factory.LazyAttribute(lambda o: canonical.content_hash(o.body))
    author_label = "factory"
    frozen_at = factory.Faker("date_time", tzinfo=UTC)
