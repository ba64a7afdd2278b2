"""ASGI entry point of the config stream server (strategies.runtime.stream): the held
connections of runtimes that want to hear of a release change within a second, served by an
async server beside the WSGI web server, never by its worker threads:

    granian --interface asgi --port 8001 console.stream:application

It answers only `GET /api/v1/runtime/stream/<agent>` and `GET /healthz`.
"""

from __future__ import annotations

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
django.setup()

# Django is set up only now, so these imports come after it.
from console.kernel.database_role import refuse_to_start_as_privileged_role  # noqa: E402
from strategies.runtime.stream import StreamApplication  # noqa: E402

refuse_to_start_as_privileged_role()

application = StreamApplication()
