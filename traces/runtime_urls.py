"""Runtime API for traces (/api/v1/runtime/): authenticated by runtime token, not login."""

from django.contrib.auth.decorators import login_not_required
from django.urls import path

from console.kernel.policy import PUBLIC
from traces import api

urlpatterns = [
    path("traces", login_not_required(api.runtime_traces_ingest), name="runtime-traces-ingest"),
]

# PUBLIC for the login wall: the view authenticates its runtime token (traces:write) itself.
REQUIRED = {"runtime-traces-ingest": PUBLIC}
