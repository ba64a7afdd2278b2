"""Issue 36, item 4: the reads that can wait for replication come from a streaming standby.

A real console process (granian) on a PostgreSQL primary of the test's own and a hot standby
streamed from it (base backup plus WAL streaming). The search and the trace page (and their
API twins) read from the standby while it is at most STANDBY_MAX_LAG_SECONDS behind; who may
see a trace is always asked of the primary; a standby too far behind or stopped gives the
reads back to the primary, logged."""

from __future__ import annotations

import http.cookiejar
import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

import orjson
import pytest

from console.accounts.personal_tokens import personal_token_create
from tests.engines import child_env, own_postgres, own_standby
from tests.factories import release_setup_serving, runtime_token, trace_payload
from tests.factories.users import user_with_grants
from tests.runtime_sim import ConsoleServer, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

MAX_LAG = 20  # seconds: long enough for a few calls on a busy machine, short for the test


def _call(url: str, *, token: str | None = None, opener=None, method="GET", body=None):
    """(status, headers, body text) of one request."""
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(
        url, method=method, data=None if body is None else orjson.dumps(body), headers=headers
    )
    try:
        with (opener or urllib.request.build_opener()).open(request, timeout=30) as resp:
            return resp.status, resp.headers, resp.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.headers, refused.read().decode()


def _signed_in(console: ConsoleServer, username: str, password: str):
    """An opener with a session cookie, signed in through the sign-in form."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    with opener.open(f"{console.url}/login/", timeout=30) as resp:
        page = resp.read().decode()
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    form = urllib.parse.urlencode(
        {"csrfmiddlewaretoken": csrf, "username": username, "password": password}
    ).encode()
    request = urllib.request.Request(
        f"{console.url}/login/", data=form, headers={"Referer": f"{console.url}/login/"}
    )
    with opener.open(request, timeout=30) as resp:
        assert "/login/" not in resp.url, "sign-in failed"
    return opener


def test_standby__search_and_trace_page_read_from_it__behind_or_stopped_the_primary_takes_them(
    tmp_path,
):
    # Given a console on a primary with a streaming standby, a runtime, an admin with a token,
    # and a support person whose grant will be revoked
    world = release_setup_serving()
    runtime = runtime_token(world.sg, capabilities=("config:read", "traces:write"))
    _, admin_token = personal_token_create(
        user=world.admin, name="standby", capabilities=["view_traces"], all_agents=True
    )
    support = user_with_grants("support-1", support=None)
    _, support_token = personal_token_create(
        user=support, name="standby", capabilities=["view_traces"], all_agents=True
    )
    with (
        own_postgres(tmp_path / "primary") as (primary, url),
        own_standby(primary) as (standby_url, standby_sql, stop),
    ):
        env = child_env(
            DATABASE_URL=url,
            STANDBY_DATABASE_URL=standby_url,
            STANDBY_MAX_LAG_SECONDS=str(MAX_LAG),
            STANDBY_CHECK_SECONDS="0.2",
            STANDBY_SHOW_LAG_SECONDS="1",
            CACHE_PREFIX=f"standby-{uuid.uuid4().hex[:8]}",
            LOG_LEVEL="INFO",
        )
        console = ConsoleServer(env, log_path=tmp_path / "web.log").start()
        try:
            _journey(console, runtime, admin_token, support_token, standby_sql, stop)
        finally:
            console.stop()
    log = (tmp_path / "web.log").read_text()
    assert "reads fall back to the primary: the standby is" in log
    assert "behind the primary" in log and "unreachable" in log


def _journey(console, runtime, admin_token, support_token, standby_sql, stop_standby):
    api = f"{console.url}/api/v1"

    def ingest(request_id: str):
        status, _, body = _call(
            f"{api}/runtime/traces",
            token=runtime,
            method="POST",
            body={"traces": [trace_payload(request_id=request_id)]},
        )
        assert status in (200, 202), body

    def on_standby(request_id: str) -> bool:
        rows = standby_sql(f"SELECT 1 FROM traces_trace WHERE request_id = '{request_id}'")
        return bool(rows)

    def trace(request_id: str, token=admin_token):
        return _call(f"{api}/traces/{request_id}", token=token)

    # A trace stored and replayed on the standby: the API and the page read it there
    ingest("before-pause")
    wait_until(lambda: on_standby("before-pause"), timeout=30)
    status, headers, _ = trace("before-pause")
    assert status == 200
    assert headers["X-Console-Read-From"].startswith("standby; lag=")
    admin = _signed_in(console, "admin", "admin-pass-1")
    status, headers, page = _call(f"{console.url}/traces/before-pause/", opener=admin)
    assert status == 200 and "before-pause" in page
    assert headers["X-Console-Read-From"].startswith("standby")
    status, headers, page = _call(f"{console.url}/traces/search?q=before-pause", opener=admin)
    assert status == 200 and headers["X-Console-Read-From"].startswith("standby")
    # a page that must see its own writes is not lag-tolerant: the primary
    status, headers, _ = _call(f"{console.url}/releases/", opener=admin)
    assert status == 200 and "X-Console-Read-From" not in headers

    # When the standby stops replaying, what is stored meanwhile is not there yet — and the
    # page says how far behind it read
    standby_sql("SELECT pg_wal_replay_pause()")
    paused_at = time.monotonic()
    ingest("during-pause")
    status, headers, _ = trace("during-pause")
    assert time.monotonic() - paused_at < MAX_LAG, "too slow to see the standby behind"
    assert status == 404 and headers["X-Console-Read-From"].startswith("standby")
    listed = json.loads(_call(f"{api}/traces?agent=assistant_professional", token=admin_token)[2])
    ids = {row["request_id"] for row in listed.get("results", listed)}
    assert "before-pause" in ids and "during-pause" not in ids
    # Who may see traces is asked of the primary: a grant revoked there is revoked now, however
    # far behind the standby is (it still holds the grant)
    status, _, _ = trace("before-pause", token=support_token)
    assert status == 200
    _call(f"{api}/runtime/heartbeat", token=runtime)  # (any write: the standby falls behind)
    _revoke_grants_on_primary(console, "support-1")
    status, _, _ = trace("before-pause", token=support_token)
    assert status in (403, 404), "a grant revoked on the primary still let the person read"
    time.sleep(1.5)  # the page names the lag once it is over STANDBY_SHOW_LAG_SECONDS
    status, headers, page = _call(f"{console.url}/traces/before-pause/", opener=admin)
    assert time.monotonic() - paused_at < MAX_LAG, "too slow to see the standby behind"
    assert headers["X-Console-Read-From"].startswith("standby")
    assert "Read from a standby" in page and "behind the primary" in page

    # Then once it is more than MAX_LAG behind, the primary takes the reads: the trace is found
    wait_until(lambda: trace("during-pause")[0] == 200, timeout=MAX_LAG + 30, interval=0.5)
    assert trace("during-pause")[1]["X-Console-Read-From"] == "primary"

    # And once it replays again, it serves again
    standby_sql("SELECT pg_wal_replay_resume()")
    wait_until(
        lambda: trace("during-pause")[1]["X-Console-Read-From"].startswith("standby"),
        timeout=30,
        interval=0.3,
    )

    # When the standby stops, the search, the page and the API answer from the primary
    stop_standby()
    status, headers, _ = trace("during-pause")
    assert status == 200 and headers["X-Console-Read-From"] == "primary"
    status, headers, page = _call(f"{console.url}/traces/during-pause/", opener=admin)
    assert status == 200 and "during-pause" in page and headers["X-Console-Read-From"] == "primary"
    status, _, body = _call(f"{console.url}/healthz", opener=admin)
    report = json.loads(body)
    assert status == 200 and report["status"] in ("ok", "degraded")
    assert report["standby"]["used"] is False and "unreachable" in report["standby"]["reason"]


def _revoke_grants_on_primary(console: ConsoleServer, username: str) -> None:
    """Delete the person's grants in the console's own database (the primary)."""
    import psycopg

    with psycopg.connect(console.env["DATABASE_URL"], autocommit=True) as conn:
        conn.execute(
            "DELETE FROM console_grant WHERE user_id = (SELECT id FROM auth_user WHERE username = %s)",
            [username],
        )
