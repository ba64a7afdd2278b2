"""Every 4xx is logged once (issue 19, item 17e): Django's django.request record reaches one
console handler, the root's — in development (DEBUG) too, where Django's own console handler
used to print it a second time."""

from __future__ import annotations

import io
import logging

import pytest


def _console_handlers() -> list[logging.StreamHandler]:
    """The plain stream handlers a django.request record passes on its way to the root (the
    test runner's own handlers are subclasses and are left out)."""
    handlers, logger = [], logging.getLogger("django.request")
    while logger is not None:
        handlers += [h for h in logger.handlers if type(h) is logging.StreamHandler]
        logger = logger.parent if logger.propagate else None
    return handlers


@pytest.mark.django_db
@pytest.mark.parametrize("debug", [True, False])
@pytest.mark.parametrize(
    ("path", "status", "words"),
    [
        ("/no-such-page/", 404, "Not Found: /no-such-page/"),
        ("/api/v1/agents/", 401, "Unauthorized: /api/v1/agents/"),
    ],
)
def test_4xx__one_record__printed_once(client, caplog, settings, debug, path, status, words):
    settings.DEBUG = debug
    printed = io.StringIO()
    handlers = _console_handlers()
    assert handlers  # the console handler LOGGING sets on the root
    streams = [h.setStream(printed) for h in handlers]
    try:
        with caplog.at_level(logging.INFO):
            assert client.get(path).status_code == status
    finally:
        for handler, stream in zip(handlers, streams, strict=True):
            handler.setStream(stream)

    assert [r.getMessage() for r in caplog.records if r.name == "django.request"] == [words]
    assert printed.getvalue().count(words) == 1, printed.getvalue()
