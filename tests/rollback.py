"""A write the test takes back: the requests of the access-matrix and bad-input sweeps run
inside it so that one that succeeds does not change the world for the next case."""

from __future__ import annotations

from contextlib import contextmanager

from django.db import transaction


@contextmanager
def rolled_back():
    """A transaction that is rolled back at its end. It is marked the way Django's TestCase
    marks its own transactions, so an outermost service (`service_transaction(durable=True)`)
    runs inside it as it would at the top of a request."""
    block = transaction.atomic()
    block._from_testcase = True
    with block:
        yield
        transaction.set_rollback(True)
