"""WSGI entry point for the config benchmark: the console itself plus one bare Django JSON
view (`/bench/bare`) behind the same middleware, so both run in the same server and worker."""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

from django.conf import settings  # noqa: E402
from django.contrib.auth.decorators import login_not_required  # noqa: E402
from django.core.wsgi import get_wsgi_application  # noqa: E402
from django.http import JsonResponse  # noqa: E402
from django.urls import path  # noqa: E402

application = get_wsgi_application()


@login_not_required
def bare(request):
    """The baseline: a Django view that returns a small JSON document, nothing else."""
    return JsonResponse({"agent": "assistant_professional", "ok": True})


from console.urls import urlpatterns as console_urlpatterns  # noqa: E402

# Placed last, beside the runtime API's own routes, so both pay the same URL resolution and
# the comparison isolates what the endpoint itself does.
urlpatterns = [*console_urlpatterns, path("bench/bare", bare)]
settings.ROOT_URLCONF = __name__
