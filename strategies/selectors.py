"""Reads for this app. Views and API views call these; they never build querysets inline."""

from __future__ import annotations


def dashboard_context(*, user, agents) -> dict:
    """This app's part of the dashboard (see console.views.dashboard)."""
    return {}


def live_versions(*, document) -> dict[str, object]:
    """{environment key: live Version} for one document."""
    from strategies.models import Release

    return {
        r.environment.key: r.version
        for r in Release.objects.filter(document=document).select_related("environment", "version")
    }
