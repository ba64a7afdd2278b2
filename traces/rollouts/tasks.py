"""Periodic rollout jobs (CELERY_BEAT_SCHEDULE in console/settings.py)."""

from __future__ import annotations

from celery import shared_task

from traces.rollouts.evaluator import rollouts_evaluate
from traces.rollouts.services import rollout_counters_purge_expired


@shared_task(name="rollouts.evaluate", acks_late=True)
def evaluate_rollouts() -> dict[str, str]:
    """Judge every running rollout's step and act on it (traces.rollouts.evaluator)."""
    return rollouts_evaluate()


@shared_task(name="rollouts.purge_expired")
def purge_expired() -> int:
    """Drop the rollout counter rows past their 30 days, and their steps' sample ids."""
    return rollout_counters_purge_expired()
