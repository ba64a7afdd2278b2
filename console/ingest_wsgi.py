"""WSGI entry point of the ingest server: the runtime ingest routes (trace batches, outcomes)
and /healthz, in processes of their own (`make run`: INGEST_PORT, INGEST_WORKERS), so that
parsing and storing batches never takes the threads that answer config reads
(console.ingest_server)."""

from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
os.environ["CONSOLE_SERVER_ROLE"] = "ingest"  # console.ingest_server.ROLE_ENV, for /healthz
django_application = get_wsgi_application()

# Django is set up only now (get_wsgi_application), so these imports come after it.
from console.ingest_server import IngestOnly, lower_priority  # noqa: E402
from console.kernel.database_role import refuse_to_start_as_privileged_role  # noqa: E402

refuse_to_start_as_privileged_role()
lower_priority()

application = IngestOnly(django_application)
