"""The config dispatcher in front of Django (console/wsgi.py, issue 11 item 3).

For `GET|HEAD /api/v1/runtime/config/<agent>` answered from the process mirror, the
dispatcher's answer is byte for byte Django's — status line, every header in order, body —
for 200, 304, HEAD, 403 and 404, plain and behind a TLS proxy with HSTS; and anything it
cannot answer from the mirror (no, unknown or revoked token, a payload not mirrored, another
method or route, a host Django refuses, an HTTPS redirect) reaches Django untouched.
"""

from __future__ import annotations

import io
import os
import sys
import time

import pytest
from django.core.handlers.wsgi import WSGIHandler
from django.utils import timezone

from console.wsgi import ConfigDispatcher
from strategies.delivery.config import (
    INVALIDATIONS,
    MIRROR_TTL_SECONDS,
    cache_key,
    mirror,
    redis_client,
)
from strategies.releases.services import release_publish
from strategies.runtime.auth import (
    LAST_USED_KEY,
    _identity_key,
    _last_noted,
    last_used_pending,
    token_hash,
)
from strategies.runtime.models import RuntimeToken
from strategies.runtime.tokens import runtime_token_revoke
from tests.factories import AgentFactory, release_setup, runtime_token

CONFIG = "/api/v1/runtime/config/assistant_professional"

pytestmark = pytest.mark.django_db(transaction=True)


class CountingApp:
    """Django behind the dispatcher, counting what reaches it. A handler made now: Django
    builds its middleware (which reads the settings) once per handler."""

    def __init__(self):
        self.calls = 0
        self.django = WSGIHandler()

    def __call__(self, environ, start_response):
        self.calls += 1
        return self.django(environ, start_response)


def environ(path=CONFIG, method="GET", secret=None, **extra) -> dict:
    env = {
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "SCRIPT_NAME": "",
        "QUERY_STRING": "",
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8000",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "HTTP_HOST": "127.0.0.1:8000",
        "REMOTE_ADDR": "127.0.0.1",
        "wsgi.input": io.BytesIO(b""),
        "wsgi.errors": sys.stderr,
        "wsgi.url_scheme": "http",
        "wsgi.version": (1, 0),
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    if secret is not None:
        env["HTTP_AUTHORIZATION"] = f"Bearer {secret}"
    env.update(extra)
    return env


def call(app, env) -> tuple[str, list[tuple[str, str]], bytes]:
    seen = {}

    def start_response(status, headers, exc_info=None):
        seen["status"], seen["headers"] = status, list(headers)

    result = app(env, start_response)
    try:
        body = b"".join(result)
    finally:
        if hasattr(result, "close"):
            result.close()
    return seen["status"], seen["headers"], body


@pytest.fixture
def world():
    w = release_setup()
    release_publish(version=w.profile[1], environment=w.envs["sg-test"], actor=w.ops)
    release_publish(version=w.strategy[3], environment=w.envs["sg-test"], actor=w.ops)
    mirror.get("warm-up")  # starts this process's listener
    deadline = time.monotonic() + 5
    while not mirror.healthy and time.monotonic() < deadline:
        time.sleep(0.02)
    assert mirror.healthy
    return w


@pytest.fixture
def dispatcher():
    """A dispatcher made now (it reads the settings once), in front of a counting Django."""

    def make():
        counting = CountingApp()
        return ConfigDispatcher(counting), counting

    return make


def warm(app, counting, env) -> None:
    """Ask until the mirror answers (Django fills Redis, then the mirror)."""
    for _ in range(5):
        before = counting.calls
        call(app, dict(env, **{"wsgi.input": io.BytesIO(b"")}))
        if counting.calls == before:
            return
    pytest.fail("the dispatcher never answered from the mirror")


def same_answer(app, counting, env) -> tuple[str, list, bytes]:
    """The dispatcher answers without Django, with exactly Django's bytes."""
    before = counting.calls
    fast = call(app, dict(env, **{"wsgi.input": io.BytesIO(b"")}))
    assert counting.calls == before, "Django answered, not the dispatcher"
    slow = call(counting.django, dict(env, **{"wsgi.input": io.BytesIO(b"")}))
    assert fast[0] == slow[0] and fast[2] == slow[2]
    assert fast[1] == slow[1], (fast[1], slow[1])
    return fast


@pytest.mark.parametrize(
    "extra, status",
    [
        ({}, "200 OK"),
        ({"REQUEST_METHOD": "HEAD"}, "200 OK"),
        ({"HTTP_IF_NONE_MATCH": "ETAG"}, "304 Not Modified"),
        ({"HTTP_IF_NONE_MATCH": '"r1-0000", ETAG'}, "304 Not Modified"),
        ({"HTTP_IF_NONE_MATCH": '"r1-0000"'}, "200 OK"),
    ],
)
def test_dispatcher__mirrored__same_bytes_as_django(world, dispatcher, extra, status):
    app, counting = dispatcher()
    secret = runtime_token(world.envs["sg-test"])
    env = environ(secret=secret, HTTP_X_REQUEST_ID="req-7")
    warm(app, counting, env)
    etag = dict(call(counting.django, env)[1])["ETag"]
    env.update({k: v.replace("ETAG", etag) for k, v in extra.items()})

    got_status, headers, body = same_answer(app, counting, env)

    assert got_status == status
    names = [name for name, _ in headers]
    assert {"X-Request-ID", "X-Content-Type-Options", "X-Frame-Options", "Referrer-Policy"} <= set(
        names
    )
    assert dict(headers)["X-Request-ID"] == "req-7"
    if status == "200 OK" and extra.get("REQUEST_METHOD") != "HEAD":
        assert dict(headers)["Cache-Control"] == "no-cache" and body.startswith(b'{"agent"')
    else:
        assert body == b""


def test_dispatcher__no_capability_or_out_of_scope__same_errors_as_django(world, dispatcher):
    app, counting = dispatcher()
    traces_only = runtime_token(world.envs["sg-test"], capabilities=("traces:write",))
    lite_only = runtime_token(world.envs["sg-test"], agents=[AgentFactory(key="assistant_lite")])
    # Identities reach the mirror through Django's path first (Redis, then the mirror).
    for secret in (traces_only, lite_only):
        for _ in range(2):
            call(counting.django, environ(secret=secret))

    forbidden = same_answer(app, counting, environ(secret=traces_only, HTTP_X_REQUEST_ID="a"))
    out_of_scope = same_answer(app, counting, environ(secret=lite_only, HTTP_X_REQUEST_ID="b"))

    assert forbidden[0] == "403 Forbidden" and b'"code": "forbidden"' in forbidden[2]
    assert out_of_scope[0] == "404 Not Found" and b'"code": "not_found"' in out_of_scope[2]


def test_dispatcher__request_id_not_given__a_fresh_one_like_django(world, dispatcher):
    app, counting = dispatcher()
    secret = runtime_token(world.envs["sg-test"])
    env = environ(secret=secret, HTTP_X_REQUEST_ID="bad\nid")
    warm(app, counting, env)

    fast = call(app, env)
    slow = call(counting.django, dict(env, **{"wsgi.input": io.BytesIO(b"")}))

    def without_id(answer):
        return answer[0], [(k, v) for k, v in answer[1] if k != "X-Request-ID"], answer[2]

    assert without_id(fast) == without_id(slow)
    fast_id, slow_id = dict(fast[1])["X-Request-ID"], dict(slow[1])["X-Request-ID"]
    assert len(fast_id) == len(slow_id) == 32 and fast_id != slow_id


def test_dispatcher__behind_tls_proxy_with_hsts__same_bytes_as_django(world, dispatcher, settings):
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    settings.SECURE_HSTS_SECONDS = 31536000
    settings.SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    settings.SECURE_HSTS_PRELOAD = True
    settings.SECURE_SSL_REDIRECT = True
    settings.SECURE_REFERRER_POLICY = "same-origin, strict-origin"
    app, counting = dispatcher()
    secret = runtime_token(world.envs["sg-test"])
    env = environ(secret=secret, HTTP_X_REQUEST_ID="tls", HTTP_X_FORWARDED_PROTO="https")
    warm(app, counting, env)

    _, headers, _ = same_answer(app, counting, env)

    assert dict(headers)["Strict-Transport-Security"].startswith("max-age=31536000")
    # Plain HTTP must be redirected: that is Django's answer, not the dispatcher's.
    before = counting.calls
    status, headers, _ = call(app, environ(secret=secret))
    assert (status, counting.calls) == ("301 Moved Permanently", before + 1)


@pytest.mark.parametrize(
    "env_change",
    [
        {"HTTP_AUTHORIZATION": "Bearer cc_rt_unknown"},  # 401 from Django
        {"HTTP_AUTHORIZATION": ""},
        {"REQUEST_METHOD": "POST"},  # 405 from Django
        {"PATH_INFO": CONFIG + "/"},  # not the route
        {"PATH_INFO": "/api/v1/runtime/config/no_such_agent"},  # payload not mirrored: 404
        {"HTTP_HOST": "evil.example"},  # Django refuses the host (400)
        {"HTTP_COOKIE": "sessionid=stale"},  # a browser: Django deletes the stale cookie
    ],
)
def test_dispatcher__cannot_answer_from_mirror__django_answers(
    world, dispatcher, settings, env_change
):
    settings.ALLOWED_HOSTS = ["127.0.0.1"]
    app, counting = dispatcher()
    secret = runtime_token(world.envs["sg-test"])
    warm(app, counting, environ(secret=secret))
    env = environ(secret=secret, **env_change)

    before = counting.calls
    status, _, _ = call(app, env)

    assert counting.calls == before + 1
    assert status[:3] in {"200", "400", "401", "404", "405"}


def test_dispatcher__token_revoked__next_request_refused_by_django(world, dispatcher):
    app, counting = dispatcher()
    secret = runtime_token(world.envs["sg-test"])
    warm(app, counting, environ(secret=secret))

    runtime_token_revoke(
        token=RuntimeToken.objects.get(token_hash=token_hash(secret)), actor=world.admin
    )
    status, _, _ = call(app, environ(secret=secret))

    assert status == "401 Unauthorized"


def test_dispatcher__middleware_not_accounted_for__off_django_answers(world, settings):
    # GZip would compress the body and add Vary: Accept-Encoding; the dispatcher does not.
    settings.MIDDLEWARE = ["django.middleware.gzip.GZipMiddleware", *settings.MIDDLEWARE]
    counting = CountingApp()
    app = ConfigDispatcher(counting)
    secret = runtime_token(world.envs["sg-test"])

    for _ in range(3):
        call(app, environ(secret=secret, HTTP_ACCEPT_ENCODING="gzip"))

    assert app.enabled is False and counting.calls == 3


@pytest.mark.parametrize("stream_url", [":8001", "https://stream.console.example"])
@pytest.mark.parametrize(
    "extra, status", [({}, "200 OK"), ({"HTTP_IF_NONE_MATCH": "ETAG"}, "304 Not Modified")]
)
def test_dispatcher__stream_url_set__both_paths_advertise_the_same_stream(
    world, dispatcher, settings, stream_url, extra, status
):
    # Given a console with a stream server (docs/runtime-contract.md §1a)
    settings.STREAM_URL = stream_url
    app, counting = dispatcher()
    secret = runtime_token(world.envs["sg-test"])
    env = environ(secret=secret, HTTP_X_REQUEST_ID="req-8")
    warm(app, counting, env)
    etag = dict(call(counting.django, env)[1])["ETag"]
    env.update({k: v.replace("ETAG", etag) for k, v in extra.items()})

    # When the mirror answers, Django's bytes exactly, and both name the stream
    got_status, headers, _ = same_answer(app, counting, env)

    assert got_status == status
    assert dict(headers)["X-Config-Stream"] == stream_url


# --- the remembered answers (issue 21 item 10) ----------------------------------------------------
# The dispatcher keeps the answer of a token for an agent while the mirror vouches for both:
# any invalidation (a publish, a revocation, a reconnection, here or in another process), the
# end of either mirror entry's lifetime or a mirror that stopped listening ends it.


def wait_until(condition, timeout=5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


def test_dispatcher__answer_remembered__revoked_in_another_process__refused(world, dispatcher):
    app, counting = dispatcher()
    secret = runtime_token(world.envs["sg-test"])
    warm(app, counting, environ(secret=secret))
    assert app._answers, "the answer was not remembered"
    generation = mirror.generation

    # What another web process does when it revokes (its own mirror aside): the row, the
    # tombstone in Redis, the invalidation on the channel every process listens to.
    hash_hex = token_hash(secret)
    RuntimeToken.objects.filter(token_hash=hash_hex).update(revoked_at=timezone.now())
    key = _identity_key(hash_hex)
    redis_client().set(key, b"-", ex=60)
    redis_client().publish(cache_key(INVALIDATIONS), key)
    assert wait_until(lambda: mirror.generation != generation)

    status, _, _ = call(app, environ(secret=secret))

    assert status == "401 Unauthorized"


def test_dispatcher__answer_remembered__publish__new_etag_at_once(world, dispatcher):
    app, counting = dispatcher()
    secret = runtime_token(world.envs["sg-test"])
    warm(app, counting, environ(secret=secret))
    first = dict(call(app, environ(secret=secret))[1])["ETag"]

    release_publish(version=world.strategy[2], environment=world.envs["sg-test"], actor=world.ops)
    status, headers, body = call(app, environ(secret=secret, HTTP_IF_NONE_MATCH=first))

    assert status == "200 OK" and dict(headers)["ETag"] != first
    assert b'"version": 2' in body or b'"version":2' in body
    warm(app, counting, environ(secret=secret))  # the new answer is remembered in turn
    again = same_answer(app, counting, environ(secret=secret, HTTP_X_REQUEST_ID="p"))
    assert dict(again[1])["ETag"] != first


def test_dispatcher__answer_remembered__invalidation_lost__ends_with_the_mirror_entry(
    world, dispatcher, monkeypatch
):
    app, counting = dispatcher()
    secret = runtime_token(world.envs["sg-test"])
    warm(app, counting, environ(secret=secret))
    later = time.monotonic() + MIRROR_TTL_SECONDS + 1  # no invalidation came
    monkeypatch.setattr(mirror, "clock", lambda: later)

    before = counting.calls
    status, _, _ = call(app, environ(secret=secret))

    assert (status, counting.calls) == ("200 OK", before + 1)  # Django, then Redis, answered


def test_dispatcher__answer_remembered__mirror_not_listening__django_answers(world, dispatcher):
    app, counting = dispatcher()
    secret = runtime_token(world.envs["sg-test"])
    warm(app, counting, environ(secret=secret))

    mirror.healthy = False  # the listener lost Redis: invalidations may be missed
    try:
        before = counting.calls
        status, _, _ = call(app, environ(secret=secret))
    finally:
        mirror.healthy = True

    assert (status, counting.calls) == ("200 OK", before + 1)


def test_dispatcher__new_answer_from_the_mirror__use_of_the_token_noted(world, dispatcher):
    app, counting = dispatcher()
    secret = runtime_token(world.envs["sg-test"])
    warm(app, counting, environ(secret=secret))
    token_id = RuntimeToken.objects.get(token_hash=token_hash(secret)).pk
    redis_client().delete(cache_key(LAST_USED_KEY))
    _last_noted.clear()

    mirror.forget("another-key")  # any invalidation: the answer is built again
    before = counting.calls
    call(app, environ(secret=secret))

    assert counting.calls == before  # the dispatcher answered, from the mirror
    assert token_id in last_used_pending()


def test_dispatcher__request_ids__unique_like_uuid_hex_and_new_after_fork(world, dispatcher):
    app, counting = dispatcher()
    secret = runtime_token(world.envs["sg-test"])
    warm(app, counting, environ(secret=secret))

    ids = [dict(call(app, environ(secret=secret))[1])["X-Request-ID"] for _ in range(1000)]

    assert len(set(ids)) == 1000
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a worker forked from a process that served requests
        try:
            os.write(write, f"{app._request_ids.new()} {mirror.healthy}".encode())
        finally:
            os._exit(0)
    os.close(write)
    child_id, child_mirror_healthy = os.read(read, 100).decode().split()
    os.waitpid(pid, 0)
    assert child_id[:20] != ids[0][:20] and child_id not in ids
    assert child_mirror_healthy == "False"  # no remembered answer served before it listens
