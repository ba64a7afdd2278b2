"""Demo agents, environments, manifests and documents (DEMO.md). Idempotent."""

from __future__ import annotations

import copy

from strategies import documents
from strategies.models import Agent, Document, Environment, Manifest

AGENTS = [
    ("assistant_professional", "Assistant Professional", "The Bank agent of document 000."),
    ("assistant_lite", "Assistant Lite", "The lite agent (document 000 step 14)."),
]
# key, name, position, protected
ENVIRONMENTS = [
    ("sg-test", "SG test", 1, False),
    ("bank-uat", "Bank UAT", 2, False),
    ("prod", "Production", 3, True),
]


def manifest_body(environment_key: str) -> dict:
    body = copy.deepcopy(documents.DEMO_MANIFEST)
    if environment_key == "bank-uat":
        body["handlers"] = []  # bank-uat's runtime does not implement general_policy_only yet
    return body


def load(stdout=None) -> None:
    for key, name, description in AGENTS:
        Agent.objects.get_or_create(key=key, defaults={"name": name, "description": description})
    for key, name, position, protected in ENVIRONMENTS:
        env, _ = Environment.objects.get_or_create(
            key=key, defaults={"name": name, "position": position, "protected": protected}
        )
        if not env.manifests.exists():
            body = manifest_body(key)
            Manifest.objects.create(
                environment=env,
                version=1,
                runtime="bank-assistant 2026.11.3",
                body=body,
                content_hash=documents.content_hash(body),
                reported_by="demo",
            )
    for agent in Agent.objects.all():
        Document.objects.get_or_create(
            agent=agent,
            key=Document.PROFILE_KEY,
            defaults={"kind": Document.Kind.PROFILE, "name": "Context profile"},
        )
