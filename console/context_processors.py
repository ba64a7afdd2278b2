"""Layout context for base.html: navigation, the request_id search target, role summary."""

from __future__ import annotations

from django.urls import NoReverseMatch, reverse

# (label, url name, the URL prefix that marks it active). Items whose URL does not exist
# yet are left out, so an app adds its page by adding its URL.
NAV = [
    ("Dashboard", "dashboard", None),
    ("Agents", "agent-list", "/agents/"),
    ("Releases", "release-overview", "/releases/"),
    ("Traces", "trace-list", "/traces/"),
    ("Audit", "audit-list", "/audit/"),
    ("Access", "access-overview", "/access/"),
]


def _url(name: str) -> str | None:
    try:
        return reverse(name)
    except NoReverseMatch:
        return None


class NavItem:
    __slots__ = ("label", "url", "active")

    def __init__(self, label: str, url: str, active: bool):
        self.label, self.url, self.active = label, url, active


def layout(request):
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"nav_items": [], "trace_search_url": None, "user_roles_summary": ""}
    from console.policy import role_names

    path = request.path
    items = []
    for label, name, prefix in NAV:
        url = _url(name)
        if url is None:
            continue
        active = path.startswith(prefix) if prefix else path == url
        items.append(NavItem(label, url, active))
    roles = role_names(user)
    summary = ", ".join(r.replace("@*", " (all agents)").replace("@", " on ") for r in roles)
    return {
        "nav_items": items,
        "trace_search_url": _url("trace-search"),
        "user_roles_summary": summary,
    }
