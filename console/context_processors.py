"""Layout context for base.html: navigation, the request_id search target, role summary."""

from __future__ import annotations

from django.conf import settings
from django.urls import reverse

from console.kernel.policy import role_names, user_can_anywhere
from console.kernel.standby import lag_read

# (label, url name, the URL prefix that marks it active, the capability — on at least one
# agent — that shows it).
NAV = [
    ("Dashboard", "dashboard", None, None),
    ("Agents", "agent-list", "/agents/", None),
    ("Releases", "release-overview", "/releases/", None),
    ("Traces", "trace-list", "/traces/", "view_traces"),
    ("Audit", "audit-list", "/audit/", "view_audit"),
    ("Access", "access-overview", "/access/", "manage_grants"),
    ("Agents & environments", "catalog", "/catalog/", "manage_catalog"),
]


class NavItem:
    __slots__ = ("label", "url", "active")

    def __init__(self, label: str, url: str, active: bool):
        self.label, self.url, self.active = label, url, active


def layout(request):
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"nav_items": [], "trace_search_url": None, "user_roles_summary": ""}

    path = request.path
    items = []
    for label, name, prefix, capability in NAV:
        if capability and not user_can_anywhere(user, capability):
            continue
        url = reverse(name)
        active = path.startswith(prefix) if prefix else path == url
        items.append(NavItem(label, url, active))
    roles = role_names(user)
    summary = ", ".join(r.replace("@*", " (all agents)").replace("@", " on ") for r in roles)
    return {
        "nav_items": items,
        "trace_search_url": reverse("trace-search")
        if user_can_anywhere(user, "view_traces")
        else None,
        "user_roles_summary": summary,
        "standby_lag": standby_lag_shown(),
    }


def standby_lag_shown() -> float | None:
    """How far behind the standby this page read from is, when enough to matter."""
    lag = lag_read()
    return lag if lag is not None and lag > settings.STANDBY_SHOW_LAG_SECONDS else None
