"""The transaction of a service: one unit of work, atomic, its refusals logged.

`@service_transaction` opens the service's transaction (a savepoint when another service
called it). `@service_transaction(durable=True)` marks an outermost service, one that only
an interface (a view, an API view, a task, a command) calls: Django then refuses to run it
inside another transaction, so its commit is the real commit and what it schedules with
`transaction.on_commit` (webhooks, tasks) really runs after it — as Zulip's actions declare
with `durable=True`. Services that other services compose (publish inside an import, a
draft inside a document's creation) stay nestable.

The audit and access rows a service writes are appended as the last step of the outermost
service transaction, just before it commits (`console.kernel.audit.log_rows_appended_last`):
the lock order everywhere is the domain rows first, the audit chains' lock last, and that
console-wide lock is held only while the transaction commits.
"""

from __future__ import annotations

from functools import wraps

from django.db import transaction

from console.kernel.audit import log_rows_appended_last
from console.kernel.policy import denials_logged


def service_transaction(func=None, *, durable: bool = False):
    """Atomic, its audit rows appended as its last step, and a refusal raised inside is
    written to the access log once the transaction is over (it would roll back with it
    otherwise)."""

    def decorate(func):
        @wraps(func)
        def run(*args, **kwargs):
            with denials_logged(), transaction.atomic(durable=durable), log_rows_appended_last():
                return func(*args, **kwargs)

        run.durable = durable
        return run

    return decorate(func) if func is not None else decorate
