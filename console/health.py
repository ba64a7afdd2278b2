"""Readiness checks for /healthz: the database and the broker, each with a short timeout.

What failed and why (exception text, with hosts and ports) is for signed-in users and the
application log; anonymous callers (load balancers, probes) get the status of each check
only (`health_public`)."""

from __future__ import annotations

import logging
import time

import redis
from django.conf import settings
from django.db import connection


def check_database() -> tuple[bool, str]:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
        return True, "ok"
    except Exception as exc:  # any failure is a failed check, reported by name
        return False, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def check_broker() -> tuple[bool, str]:
    url = settings.CELERY_BROKER_URL.replace("redis+socket://", "unix://")
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)
        client.ping()
        return True, "ok"
    except Exception as exc:
        return False, f"{type(exc).__name__}: {exc}"


logger = logging.getLogger(__name__)


def health_report() -> tuple[bool, dict]:
    started = time.perf_counter()
    db_ok, db_detail = check_database()
    broker_ok, broker_detail = check_broker()
    ok = db_ok and broker_ok
    return ok, {
        "status": "ok" if ok else "unavailable",
        "checks": {
            "database": {"ok": db_ok, "detail": db_detail},
            "broker": {"ok": broker_ok, "detail": broker_detail},
        },
        "failed": [name for name, good in (("database", db_ok), ("broker", broker_ok)) if not good],
        "duration_ms": round((time.perf_counter() - started) * 1000, 1),
    }


def health_public(report: dict) -> dict:
    """The report as an anonymous caller sees it: the same shape without any `detail` (the
    exception texts name hosts and ports). The details go to the application log instead."""
    for name, check in report["checks"].items():
        if not check["ok"]:
            logger.warning("health check %s failed: %s", name, check.get("detail", ""))
    return {
        **report,
        "checks": {
            name: {key: value for key, value in check.items() if key != "detail"}
            for name, check in report["checks"].items()
        },
    }
