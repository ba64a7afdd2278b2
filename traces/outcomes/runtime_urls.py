"""Runtime API for outcomes (/api/v1/runtime/): authenticated by runtime token, not login."""

from django.contrib.auth.decorators import login_not_required
from django.urls import path

from console.kernel.policy import PUBLIC
from traces.outcomes import api

urlpatterns = [
    path(
        "outcomes",
        login_not_required(api.runtime_outcomes_report),
        name="runtime-outcomes-report",
    ),
]

# PUBLIC for the login wall: the view authenticates its runtime token (outcomes:write or
# traces:write) itself.
REQUIRED = {"runtime-outcomes-report": PUBLIC}
