"""Periodic rollout jobs (CELERY_BEAT_SCHEDULE in console/settings.py)."""

from __future__ import annotations

from celery import shared_task

from traces.rollouts.evaluator import rollouts_evaluate


@shared_task(name="rollouts.evaluate", acks_late=True)
def evaluate_rollouts() -> dict[str, str]:
    """Judge every running rollout's step and act on it (traces.rollouts.evaluator)."""
    return rollouts_evaluate()
