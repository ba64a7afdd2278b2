"""Reads for data protection: an environment's rules, the erasure receipts."""

from __future__ import annotations

from console.kernel.errors import NotFound
from traces.models import Erasure, RedactionRule


def redaction_rules(*, environment) -> list[RedactionRule]:
    return list(RedactionRule.objects.filter(environment=environment).order_by("key"))


def redaction_rule_get(*, environment, key: str) -> RedactionRule:
    rule = RedactionRule.objects.filter(environment=environment, key=key).first()
    if rule is None:
        raise NotFound(f"{environment.key} has no redaction rule named {key}.")
    return rule


def erasures(*, limit: int = 50) -> list[Erasure]:
    return list(Erasure.objects.all()[:limit])


def erasure_get(*, pk: int) -> Erasure:
    erasure = Erasure.objects.filter(pk=pk).first()
    if erasure is None:
        raise NotFound("No such erasure.")
    return erasure
