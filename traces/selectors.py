"""Reads for this app. Views and API views call these; they never build querysets inline."""

from __future__ import annotations


def dashboard_context(*, user, agents) -> dict:
    """This app's part of the dashboard (see console.views.dashboard)."""
    return {}
