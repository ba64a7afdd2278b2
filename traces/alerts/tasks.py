"""The evaluator's beat task (CELERY_BEAT_SCHEDULE in console/settings.py: every
ALERT_EVALUATION_SECONDS)."""

from __future__ import annotations

from celery import shared_task

from traces.alerts import services


@shared_task(name="alerts.evaluate")
def evaluate() -> dict:
    tick = services.alerts_evaluate()
    return {"rules": tick.rules, "fired": tick.fired, "resolved": tick.resolved}
