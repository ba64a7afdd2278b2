"""The releases overview: per agent the user may see, documents × environments with what is
live, what waits and the actions the user may take."""

from __future__ import annotations

from django.template.response import TemplateResponse
from django.views.decorators.http import require_http_methods

from console.kernel import clock
from console.kernel.policy import Capability, agents_where, user_can, user_can_cancel_schedule
from strategies.catalog.selectors import environment_list
from strategies.releases import selectors
from strategies.releases.selectors.calendar import calendar_summary, schedules_open


# --- overview ------------------------------------------------------------------------------------------
@require_http_methods(["GET"])
def overview(request):
    """Per agent where the user may view configuration: documents × environments (sg-test →
    bank-uat → prod), live versions, pending approvals and the actions this user may take."""
    visible = list(agents_where(request.user, Capability.VIEW_CONFIG).order_by("key"))
    chosen = request.GET.get("agent", "")
    # Archived agents leave the picker and the full list; their own tab (?agent=) still shows.
    listed = [a for a in visible if a.archived_at is None or a.key == chosen]
    agents = [a for a in visible if a.key == chosen] if chosen else listed
    grids = [
        (
            agent,
            selectors.release_grid(user=request.user, agent=agent),
            selectors.promotion_pairs(user=request.user, agent=agent),
        )
        for agent in agents
    ]
    environments = environment_list()
    scheduled = schedules_open(agents=agents)
    for planned in scheduled:
        planned.can_cancel = planned.state == planned.State.SCHEDULED and (
            user_can_cancel_schedule(request.user, planned)
        )
    return TemplateResponse(
        request,
        "releases/overview.html",
        {
            # What is scheduled, and each environment's freeze / change-hours window now.
            "scheduled": scheduled,
            # The countdowns read the rules' clock (console.kernel.clock), as the schedules do.
            "now": clock.now(),
            "calendars": [(env, calendar_summary(env)) for env in environments],
            # Admins edit an environment's calendar (its freezes and change hours).
            "can_manage_calendars": user_can(request.user, Capability.MANAGE_CATALOG),
            "grids": grids,
            "visible_agents": listed,
            "chosen": chosen,
            "environments": environments,
            "pending": selectors.pending_approvals(agents=agents),
            "can_manage_runtime_tokens": user_can(request.user, Capability.MANAGE_RUNTIME_TOKENS),
            "can_manage_webhooks": user_can(request.user, Capability.MANAGE_TOKENS),
        },
    )
