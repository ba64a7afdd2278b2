"""A fake console on loopback that speaks the runtime contract, for the SDK's I/O tests.

It serves ``GET config/{agent}`` with a strong ETag and 304 for a matching ``If-None-Match``,
takes ``PUT manifest`` and ``POST traces`` (de-duplicating by ``request_id``, refusing a
request that is no batch and rejecting bad traces one by one with paths and codes, like the
real ingest), ``POST outcomes`` (§3b: the kinds of ``OUTCOME_KINDS``, one value per request
and kind, a repeat with the same value a duplicate and another one refused) and
``POST heartbeat`` (§2a, validated as the console does), and can be switched
per endpoint to answer 500, 401, garbage, an invalid body, or to hang. It records every
request so tests can assert what the runtime sent.

With ``stream=True`` it is a console with a stream server (§1a): config answers carry
``X-Config-Stream: :<its port>`` and ``GET stream/{agent}`` holds a server-sent event stream
(the current ETag at connect unless ``Last-Event-ID`` is current, one event per
:meth:`FakeConsole.publish`, a ``: hb`` comment every ``stream_heartbeat`` seconds);
:meth:`FakeConsole.drop_streams` ends every stream at once, as a console restart does.
Without it (the default, like a console without ``STREAM_URL``) the stream path is a 404.

Tests get one through the ``console`` fixture of ``conftest.py``; ``test_fake_console.py``
checks the fake itself, and ``test_contract_examples.py`` checks it answers the contract's
examples as the real console does.
"""

from __future__ import annotations

import copy
import hashlib
import json
import queue
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import msgspec
from context_runtime.manifest import validate_manifest
from context_runtime.wire import Outcome, Trace

TOKEN = "cc_rt_test-token"
# The request timeout for reporters in tests that count posts, retries or manifests: a request
# that times out is sent again (delivery is at least once; the console de-duplicates by
# request_id), so a loaded machine's slow answer must not be a timeout there.
PATIENT = 15.0
AGENT = "assistant_professional"
ENVIRONMENT = "prod"

PAYLOAD = {
    "agent": AGENT,
    "environment": ENVIRONMENT,
    "profile": {
        "version": 7,
        "body": {
            "sections": {
                "user_context": {"high_level_profile": True, "user_emails": False},
                "query_context": {"time_summary": True, "state_of_mind_schedule": False},
            },
            "switches": {
                "temporalAnchor.enabled": False,
                "toolPrefilter.enabled": False,
                "queryRelatedContextInjectorMode": "default",
                "enableQueryRelatedContext": True,
            },
        },
    },
    "strategies": {
        "after_sales_consultation": {
            "version": 3,
            "body": {
                "required": ["task_state", "order_delivery", "applicable_policy"],
                "optional": ["recent_dialogue"],
                "allowed_tools": ["lookup_order", "search_policy"],
                "on_missing": {"order_delivery": "general_policy_only"},
                "max_extra_reads": 2,
                "budget": {"max_input_tokens": 8000, "reserve_output_tokens": 1000},
            },
        },
        "small_talk": {
            "version": 1,
            "body": {"required": ["recent_dialogue"], "budget": {"max_input_tokens": 2000}},
        },
    },
    "shadow": {},
}

# The outcome kinds the fake's environment declares (the demo's): kind → a check of a value.
OUTCOME_KINDS = {
    "task_completed": lambda v: isinstance(v, bool),
    "escalated": lambda v: isinstance(v, bool),
    "rating": lambda v: type(v) is int and 1 <= v <= 5,
    "resolution": lambda v: v in ("refund", "replacement", "explained", "other"),
}

# Modes per endpoint ("config", "traces", "outcomes", "manifest").
OK = "ok"
ERROR_500 = "500"
UNAUTHORIZED = "401"
GARBAGE = "garbage"  # config: 200 with bytes that are not JSON
HANG = "hang"  # wait ``hang_seconds`` before answering
COMMIT_THEN_500 = "commit_then_500"  # traces: store the batch, then answer 500
# stream: after the first event, an event that never ends — data lines with no blank line
# after them, or one line with no end — up to ``endless_bytes`` or until the runtime hangs up
ENDLESS_EVENT = "endless_event"
ENDLESS_LINE = "endless_line"


def dead_url() -> str:
    """A loopback URL where nothing listens (connection refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


class FakeConsole:
    """``port``: listen there (a console coming back where runtimes expect it); ``token``:
    the one token it takes (change it to revoke the runtime's)."""

    def __init__(self, payload: dict | None = None, *, port: int = 0, stream: bool = False):
        self.lock = threading.Lock()
        self.token = TOKEN
        self.payload = copy.deepcopy(payload or PAYLOAD)
        self.revision = 41
        self.etag = self._etag()
        endpoints = ("config", "traces", "outcomes", "manifest", "stream", "heartbeat")
        self.modes = dict.fromkeys(endpoints, OK)
        # statuses to answer first
        self.fail_next: dict[str, list] = {endpoint: [] for endpoint in endpoints}
        self.statuses: set | None = None  # the trace statuses it knows (None: this SDK's)
        self.hang_seconds = 3.0
        # When set, every config request gets 200 with these bytes under the current ETag,
        # If-None-Match ignored: a console (or a cache in front of it) that misbehaves.
        self.config_body: bytes | None = None
        self.max_batch_bytes: int | None = None  # traces larger than this → 413
        self.config_requests: list[tuple[str | None, int]] = []  # (If-None-Match, status)
        self.trace_posts: list[dict] = []  # {"status", "bytes", "request_ids"}
        self.stored: dict[str, dict] = {}
        self.outcome_posts: list[dict] = []  # {"status", "keys": [(request_id, kind)]}
        self.outcomes: dict[tuple[str, str], object] = {}  # (request_id, kind) → value
        self.outcome_agents: dict[tuple[str, str], str | None] = {}  # the agent each named
        # The console's rule for a token covering several agents: an outcome of a request
        # with no stored trace must name its agent (traces.outcomes.services).
        self.token_covers_several_agents = False
        self.manifests: list[dict] = []
        self.manifest_warnings: list[dict] = []
        # Set to (status, code, message, details): every report is refused so (e.g. 409
        # manifest_breaks_live); manifest_instances records each report's X-Runtime-Instance.
        self.manifest_refusal: tuple | None = None
        self.manifest_instances: list[str | None] = []
        self.heartbeats: list[dict] = []  # the bodies the console recorded
        # The stream (§1a): on or off, its heartbeat, the open streams' queues and every
        # connection taken (time.monotonic(), Last-Event-ID).
        self.stream_enabled = stream
        self.stream_heartbeat = 15.0
        self.stream_connects: list[tuple[float, str | None]] = []
        self.stream_requests = 0  # every stream request, refused ones too
        self.endless_bytes = 64 * 1024 * 1024
        # Per endless stream: (bytes written, whether the runtime hung up before the end).
        self.endless_sent: list[tuple[int, bool]] = []
        self._streams: set[queue.Queue] = set()
        self._released = threading.Event()
        console = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output quiet
                pass

            def do_GET(self):
                if self.path.startswith("/api/v1/runtime/stream/"):
                    console._stream(self)
                else:
                    console._config(self)

            def do_POST(self):
                if self.path.startswith("/api/v1/runtime/heartbeat"):
                    console._heartbeat(self)
                elif self.path.startswith("/api/v1/runtime/outcomes"):
                    console._outcomes(self)
                else:
                    console._traces(self)

            def do_PUT(self):
                console._manifest(self)

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            block_on_close = False
            request_queue_size = 256  # a restart brings every runtime back within a second
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()

    # ------------------------------------------------------------ test controls

    def publish(self, mutate=None, **strategies) -> str:
        """Change the payload (``mutate(payload)`` and/or whole strategy entries) and give
        it a new ETag, as a release change does."""
        with self.lock:
            if mutate is not None:
                mutate(self.payload)
            for key, entry in strategies.items():
                self.payload["strategies"][key] = entry
            self.revision += 1
            self.etag = self._etag()
            for stream in self._streams:  # as the console's NOTIFY at commit
                stream.put(self.etag)
            return self.etag

    def drop_streams(self) -> int:
        """End every open stream at once (what a console restart does to them); returns
        how many were open."""
        with self.lock:
            streams = list(self._streams)
        for stream in streams:
            stream.put(None)
        return len(streams)

    @property
    def open_streams(self) -> int:
        with self.lock:
            return len(self._streams)

    def close(self) -> None:
        self._released.set()
        self.drop_streams()
        self.server.shutdown()
        self.server.server_close()

    def posted_request_ids(self) -> list[str]:
        return [rid for post in self.trace_posts for rid in post["request_ids"]]

    def _etag(self) -> str:
        digest = hashlib.sha256(json.dumps(self.payload, sort_keys=True).encode()).hexdigest()
        return f'"r{self.revision}-{digest[:4]}"'

    # ------------------------------------------------------------ endpoints

    def _gate(self, endpoint: str, handler) -> str | None:
        """Auth, scripted failures and hanging; returns the mode to answer in, or None when
        the answer was sent already."""
        if handler.headers.get("Authorization") != f"Bearer {self.token}":
            _send_error(handler, 401, "not_authenticated", "Unknown token.")
            return None
        with self.lock:
            mode = self.modes[endpoint]
            scripted = self.fail_next[endpoint].pop(0) if self.fail_next[endpoint] else None
        if scripted is not None:
            _send_error(handler, scripted, "scripted", f"Scripted {scripted}.")
            return None
        if mode == HANG:
            self._released.wait(self.hang_seconds)
        if mode == ERROR_500:
            _send_error(handler, 500, "server_error", "Something broke.")
            return None
        if mode == UNAUTHORIZED:
            _send_error(handler, 401, "not_authenticated", "Revoked token.")
            return None
        return mode

    def _config(self, handler) -> None:
        inm = handler.headers.get("If-None-Match")
        mode = self._gate("config", handler)
        if mode is None:
            self.config_requests.append((inm, 0))
            return
        if not handler.path.startswith(f"/api/v1/runtime/config/{AGENT}"):
            _send_error(handler, 404, "not_found", "No such agent.")
            return
        with self.lock:
            etag = self.etag
            headers = {"ETag": etag}
            if self.stream_enabled:  # the console's STREAM_URL as ":<port>"
                headers["X-Config-Stream"] = f":{self.server.server_address[1]}"
            body = msgspec.json.encode({**self.payload, "etag": etag})
            if self.config_body is not None:
                self.config_requests.append((inm, 200))
                _send(handler, 200, self.config_body, headers)
                return
        if mode == GARBAGE:
            self.config_requests.append((inm, 200))
            _send(handler, 200, b'{"agent": "assistant_prof', headers)
            return
        if inm == etag:
            self.config_requests.append((inm, 304))
            _send(handler, 304, b"", headers)
            return
        self.config_requests.append((inm, 200))
        _send(handler, 200, body, headers)

    def _stream(self, handler) -> None:
        """``GET stream/{agent}`` (§1a): refused at once like the console (404 without a
        stream server, 401 with ``WWW-Authenticate``, 404 for another agent), else an event
        stream held until :meth:`drop_streams` or the client goes."""
        with self.lock:
            self.stream_requests += 1
        if not self.stream_enabled:
            _send_error(handler, 404, "not_found", "Not found.")
            return
        if handler.headers.get("Authorization") != f"Bearer {self.token}":
            body = {"error": {"code": "not_authenticated", "message": "Unknown token.",
                              "details": []}}  # fmt: skip
            _send(handler, 401, msgspec.json.encode(body),
                  {"WWW-Authenticate": 'Bearer realm="runtime"'})  # fmt: skip
            return
        mode = self._gate("stream", handler)
        if mode is None:
            return
        if handler.path.split("?", 1)[0] != f"/api/v1/runtime/stream/{AGENT}":
            _send_error(handler, 404, "not_found", f"Unknown agent '{handler.path}'.")
            return
        known = handler.headers.get("Last-Event-ID") or handler.headers.get("If-None-Match")
        events: queue.Queue = queue.Queue()
        with self.lock:
            self._streams.add(events)
            self.stream_connects.append((time.monotonic(), known))
            etag = self.etag
        try:
            handler.send_response(200)
            handler.send_header("Content-Type", "text/event-stream; charset=utf-8")
            handler.send_header("Cache-Control", "no-cache")
            handler.send_header("X-Accel-Buffering", "no")
            handler.end_headers()
            first = b"retry: 2000\n: connected\n\n"
            if (known or "").strip() != etag:
                first += _event(etag)
            handler.wfile.write(first)
            handler.wfile.flush()
            if mode in (ENDLESS_EVENT, ENDLESS_LINE):
                self._endless(handler, mode)
                return
            sent = etag
            while not self._released.is_set():
                try:
                    newest = events.get(timeout=self.stream_heartbeat)
                except queue.Empty:
                    handler.wfile.write(b": hb\n\n")
                    handler.wfile.flush()
                    continue
                if newest is None:  # dropped (a restart)
                    return
                if newest != sent:
                    sent = newest
                    handler.wfile.write(_event(newest))
                    handler.wfile.flush()
        except OSError:
            pass  # the runtime went away
        finally:
            with self.lock:
                self._streams.discard(events)
            handler.close_connection = True

    def _endless(self, handler, mode: str) -> None:
        """Write an event that never ends until ``endless_bytes`` or the runtime hangs up."""
        if mode == ENDLESS_EVENT:
            chunk = b"".join(b"data: " + b"x" * 1000 + b"\n" for _ in range(64))
        else:
            handler.wfile.write(b"data: ")
            chunk = b"x" * 64_000
        written, hung_up = 0, False
        try:
            while written < self.endless_bytes:
                handler.wfile.write(chunk)
                written += len(chunk)
        except OSError:
            hung_up = True
        with self.lock:
            self.endless_sent.append((written, hung_up))

    def _heartbeat(self, handler) -> None:
        """``POST heartbeat`` (§2a), validated as the console validates it."""
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length)
        if self._gate("heartbeat", handler) is None:
            return
        try:
            body = msgspec.json.decode(raw)
        except msgspec.DecodeError:
            _send_error(handler, 400, "malformed_json", "The body is not valid JSON.", path="")
            return
        problem = _heartbeat_problem(body)
        if problem is not None:
            path, code, message = problem
            _send_error(handler, 400, "validation_failed", message, path=path, path_code=code)
            return
        unknown = sorted(set(body["agents"]) - {AGENT})
        if unknown:
            _send_error(handler, 404, "not_found", f"Unknown agent '{unknown[0]}'.")
            return
        with self.lock:
            self.heartbeats.append(body)
        answer = {"recorded": len(body["agents"]), "heartbeat_seconds": 60,
                  "minimum_sdk_version": MINIMUM_SDK_VERSION,
                  "sdk_supported": _version(body.get("sdk_version") or "") >= _version(
                      MINIMUM_SDK_VERSION)}  # fmt: skip
        _send(handler, 200, msgspec.json.encode(answer))

    def _traces(self, handler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length)
        mode = self._gate("traces", handler)
        if mode is None:
            self.trace_posts.append({"status": "error", "bytes": length, "request_ids": []})
            return
        if self.max_batch_bytes is not None and length > self.max_batch_bytes:
            self.trace_posts.append({"status": 413, "bytes": length, "request_ids": []})
            _send_error(handler, 413, "payload_too_large", "Too large.")
            return
        items = _batch_items(handler, raw)
        if items is None:
            self.trace_posts.append({"status": 400, "bytes": length, "request_ids": []})
            return
        accepted, duplicates, rejected, ids = 0, [], [], []
        with self.lock:
            for index, item in enumerate(items):
                ids.append(item.get("request_id"))
                try:
                    msgspec.json.decode(msgspec.json.encode(item), type=Trace)
                except msgspec.ValidationError as error:
                    rejected.append(_rejection(index, item, *_wire_error(error)))
                    continue
                if self.statuses is not None and item.get("status") not in self.statuses:
                    # An older console: its wire knows fewer statuses.
                    rejected.append(
                        _rejection(index, item, "status", "invalid_choice", "Unknown status.")
                    )
                elif item["agent"] != AGENT:
                    rejected.append(
                        _rejection(index, item, "agent", "unknown_agent", "Unknown agent.")
                    )
                elif item["request_id"] in self.stored:
                    duplicates.append(item["request_id"])
                else:
                    self.stored[item["request_id"]] = item
                    accepted += 1
        if mode == COMMIT_THEN_500:
            with self.lock:
                self.modes["traces"] = OK  # once
            self.trace_posts.append({"status": 500, "bytes": length, "request_ids": ids})
            _send_error(handler, 500, "server_error", "Committed, then the answer was lost.")
            return
        self.trace_posts.append({"status": 200, "bytes": length, "request_ids": ids})
        answer = {"accepted": accepted, "duplicates": duplicates, "rejected": rejected}
        _send(handler, 200, msgspec.json.encode(answer))

    def _outcomes(self, handler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length)
        mode = self._gate("outcomes", handler)
        if mode is None:
            self.outcome_posts.append({"status": "error", "keys": []})
            return
        items = _batch_items(handler, raw, key="outcomes")
        if items is None:
            self.outcome_posts.append({"status": 400, "keys": []})
            return
        accepted, duplicates, rejected, keys = 0, [], [], []
        with self.lock:
            for index, item in enumerate(items):
                try:
                    outcome = msgspec.json.decode(msgspec.json.encode(item), type=Outcome)
                except msgspec.ValidationError as error:
                    rejected.append(_outcome_rejection(index, item, *_wire_error(error)))
                    continue
                key = (outcome.request_id, outcome.kind)
                keys.append(key)
                check = OUTCOME_KINDS.get(outcome.kind)
                if (
                    self.token_covers_several_agents
                    and outcome.agent is None
                    and outcome.request_id not in self.stored
                ):
                    message = (
                        "name the agent: no trace of this request is stored yet and this token "
                        "covers more than one agent"
                    )
                    rejected.append(_outcome_rejection(index, item, "agent", "required", message))
                elif check is None:
                    declared = ", ".join(sorted(OUTCOME_KINDS))
                    message = (
                        f"'{outcome.kind}' is not an outcome kind of '{ENVIRONMENT}'; declared: "
                    )
                    rejected.append(
                        _outcome_rejection(index, item, "kind", "unknown_kind", message + declared)
                    )
                elif not check(outcome.value):
                    rejected.append(
                        _outcome_rejection(index, item, "value", "invalid_value", "Invalid.")
                    )
                elif key not in self.outcomes:
                    self.outcomes[key] = outcome.value
                    self.outcome_agents[key] = outcome.agent
                    accepted += 1
                elif self.outcomes[key] == outcome.value and type(self.outcomes[key]) is type(
                    outcome.value
                ):
                    duplicates.append({"index": index, "request_id": key[0], "kind": key[1]})
                else:
                    message = f"{key[1]} of this request was already reported"
                    rejected.append(
                        _outcome_rejection(index, item, "value", "conflicting_value", message)
                    )
        if mode == COMMIT_THEN_500:
            with self.lock:
                self.modes["outcomes"] = OK  # once
            self.outcome_posts.append({"status": 500, "keys": keys})
            _send_error(handler, 500, "server_error", "Committed, then the answer was lost.")
            return
        self.outcome_posts.append({"status": 200, "keys": keys})
        answer = {"accepted": accepted, "duplicates": duplicates, "rejected": rejected}
        _send(handler, 200, msgspec.json.encode(answer))

    def _manifest(self, handler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length)
        if self._gate("manifest", handler) is None:
            return
        self.manifest_instances.append(handler.headers.get("X-Runtime-Instance"))
        if self.manifest_refusal is not None:
            _send_error(handler, *self.manifest_refusal)
            return
        body = msgspec.json.decode(raw)
        problems = validate_manifest(body)
        if problems:
            details = [{"path": p.path, "code": p.code, "message": p.message} for p in problems]
            _send_error(handler, 400, "validation_failed", "Invalid manifest.", details)
            return
        with self.lock:
            self.manifests.append(body)
            version = len(self.manifests)
        _send(
            handler,
            200,
            msgspec.json.encode({"version": version, "warnings": self.manifest_warnings}),
        )


MINIMUM_SDK_VERSION = "0.2.0"  # strategies.runtime.instances.MINIMUM_SDK_VERSION
_INSTANCE = re.compile(r"^[\x21-\x7e][\x20-\x7e]{0,199}$")


def _version(text: str) -> tuple[int, ...]:
    match = re.match(r"^(\d+)\.(\d+)(?:\.(\d+))?", text)
    return tuple(int(p or 0) for p in match.groups()) if match else (-1,)


def _heartbeat_problem(body) -> tuple[str, str, str] | None:
    """(path, code, message) of what the console refuses in a heartbeat, else None."""
    if not isinstance(body, dict):
        return "", "invalid", "The heartbeat must be a JSON object."
    instance = body.get("instance")
    if not isinstance(instance, str) or not instance:
        return "instance", "required", "instance is required."
    if not _INSTANCE.match(instance):
        return "instance", "invalid_format", "instance must be printable ASCII."
    if body.get("transport") not in (None, "", "stream", "poll", "stopped"):
        return "transport", "invalid_choice", "transport must be stream, poll or stopped."
    agents = body.get("agents")
    if not isinstance(agents, dict) or not agents or len(agents) > 100:
        return "agents", "invalid", "agents must map 1 to 100 agent keys to what is served."
    for key, entry in agents.items():
        if not isinstance(entry, dict):
            return f"agents.{key}", "invalid_type", "Each agent maps to {etag, documents}."
        documents = entry.get("documents") or {}
        if not isinstance(documents, dict) or not all(
            type(v) is int and 0 <= v < 2**31 for v in documents.values()
        ):
            return f"agents.{key}.documents", "invalid", "documents maps keys to versions."
    return None


def _event(etag: str) -> bytes:
    data = msgspec.json.encode({"agent": AGENT, "etag": etag}).decode()
    return f"id: {etag}\nevent: config\ndata: {data}\n\n".encode()


def _batch_items(handler, raw: bytes, key: str = "traces") -> list | None:
    """The batch's items (its `key` list), or None once the whole request was refused as the
    console does."""
    try:
        batch = msgspec.json.decode(raw) if raw.strip() else None
    except msgspec.DecodeError:
        batch = None
    if batch is None:
        _send_error(handler, 400, "malformed_json", "The body is not valid JSON.", path="")
        return None
    if not isinstance(batch, dict) or not isinstance(batch.get(key), list):
        article = "an" if key[0] in "aeiou" else "a"
        message = f"Send an object with {article} '{key}' list."
        _send_error(handler, 400, "validation_failed", message, path=key)
        return None
    return batch[key]


# msgspec says e.g. "Invalid enum value 'maybe' - at `$.candidates[2].decision`".
_AT = re.compile(r" - at `\$\.?(?P<path>[^`]*)`$")


def _wire_error(error: msgspec.ValidationError) -> tuple[str, str, str]:
    """(path, code, message) of a trace that does not decode: the codes of the console's
    ingest for the mistakes the SDK's tests and the contract's examples make."""
    text = str(error)
    match = _AT.search(text)
    path, message = (match.group("path"), text[: match.start()]) if match else ("", text)
    if message.startswith("Invalid enum value"):
        return path, "invalid_choice", message
    if "matching regex" in message:
        return path, "invalid_format", message
    if re.match(r"Expected `(int|float)` [<>]", message):
        return path, "out_of_range", message
    if missing := re.match(r"Object missing required field `(?P<field>[^`]+)`", message):
        field = missing.group("field")
        return (f"{path}.{field}" if path else field), "required", message
    return path, "invalid", message


def _rejection(index: int, item: dict, path: str, code: str, message: str) -> dict:
    return {
        "index": index,
        "request_id": item.get("request_id"),
        "errors": [{"path": path, "code": code, "message": message}],
    }


def _outcome_rejection(index: int, item, path: str, code: str, message: str) -> dict:
    """An outcome's rejection names its kind too (null when it has none)."""
    item = item if isinstance(item, dict) else {}
    kind = item.get("kind") if isinstance(item.get("kind"), str) else None
    request_id = item.get("request_id") if isinstance(item.get("request_id"), str) else None
    return {
        "index": index,
        "request_id": request_id,
        "kind": kind,
        "errors": [{"path": path, "code": code, "message": message}],
    }


def _send(handler, status: int, body: bytes, headers: dict | None = None) -> None:
    try:
        handler.send_response(status)
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        if status != 304:
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        if status != 304:
            handler.wfile.write(body)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the client gave up (timeout): nothing to answer


def _send_error(
    handler, status: int, code: str, message: str, details=None, path=None, path_code=None
) -> None:
    if path is not None:  # a refusal of the whole request names its one place, as the console
        details = [{"path": path, "code": path_code or code, "message": message}]
    body = {"error": {"code": code, "message": message, "details": details or []}}
    _send(handler, status, msgspec.json.encode(body))
