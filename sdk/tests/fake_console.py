"""A fake console on loopback that speaks the runtime contract, for the SDK's I/O tests.

It serves ``GET config/{agent}`` with a strong ETag and 304 for a matching ``If-None-Match``,
takes ``PUT manifest`` and ``POST traces`` (de-duplicating by ``request_id``, refusing a
request that is no batch and rejecting bad traces one by one with paths and codes, like the
real ingest), and can be switched per endpoint to answer 500, 401, garbage, an invalid body,
or to hang. It records every request so tests can assert what the runtime sent.

Tests get one through the ``console`` fixture of ``conftest.py``; ``test_fake_console.py``
checks the fake itself, and ``test_contract_examples.py`` checks it answers the contract's
examples as the real console does.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import msgspec
from context_runtime.manifest import validate_manifest
from context_runtime.wire import Trace

TOKEN = "cc_rt_test-token"
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

# Modes per endpoint ("config", "traces", "manifest").
OK = "ok"
ERROR_500 = "500"
UNAUTHORIZED = "401"
GARBAGE = "garbage"  # config: 200 with bytes that are not JSON
HANG = "hang"  # wait ``hang_seconds`` before answering
COMMIT_THEN_500 = "commit_then_500"  # traces: store the batch, then answer 500


def dead_url() -> str:
    """A loopback URL where nothing listens (connection refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


class FakeConsole:
    """``port``: listen there (a console coming back where runtimes expect it); ``token``:
    the one token it takes (change it to revoke the runtime's)."""

    def __init__(self, payload: dict | None = None, *, port: int = 0):
        self.lock = threading.Lock()
        self.token = TOKEN
        self.payload = copy.deepcopy(payload or PAYLOAD)
        self.revision = 41
        self.etag = self._etag()
        self.modes = {"config": OK, "traces": OK, "manifest": OK}
        self.fail_next = {"config": [], "traces": [], "manifest": []}  # statuses to answer first
        self.statuses: set | None = None  # the trace statuses it knows (None: this SDK's)
        self.hang_seconds = 3.0
        # When set, every config request gets 200 with these bytes under the current ETag,
        # If-None-Match ignored: a console (or a cache in front of it) that misbehaves.
        self.config_body: bytes | None = None
        self.max_batch_bytes: int | None = None  # traces larger than this → 413
        self.config_requests: list[tuple[str | None, int]] = []  # (If-None-Match, status)
        self.trace_posts: list[dict] = []  # {"status", "bytes", "request_ids"}
        self.stored: dict[str, dict] = {}
        self.manifests: list[dict] = []
        self.manifest_warnings: list[dict] = []
        self._released = threading.Event()
        console = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output quiet
                pass

            def do_GET(self):
                console._config(self)

            def do_POST(self):
                console._traces(self)

            def do_PUT(self):
                console._manifest(self)

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            block_on_close = False
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
            return self.etag

    def close(self) -> None:
        self._released.set()
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
            body = msgspec.json.encode({**self.payload, "etag": etag})
            if self.config_body is not None:
                self.config_requests.append((inm, 200))
                _send(handler, 200, self.config_body, {"ETag": etag})
                return
        if mode == GARBAGE:
            self.config_requests.append((inm, 200))
            _send(handler, 200, b'{"agent": "assistant_prof', {"ETag": etag})
            return
        if inm == etag:
            self.config_requests.append((inm, 304))
            _send(handler, 304, b"", {"ETag": etag})
            return
        self.config_requests.append((inm, 200))
        _send(handler, 200, body, {"ETag": etag})

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

    def _manifest(self, handler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length)
        if self._gate("manifest", handler) is None:
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


def _batch_items(handler, raw: bytes) -> list | None:
    """The batch's traces, or None once the whole request was refused as the console does."""
    try:
        batch = msgspec.json.decode(raw) if raw.strip() else None
    except msgspec.DecodeError:
        batch = None
    if batch is None:
        _send_error(handler, 400, "malformed_json", "The body is not valid JSON.", path="")
        return None
    if not isinstance(batch, dict) or not isinstance(batch.get("traces"), list):
        message = "Send an object with a 'traces' list."
        _send_error(handler, 400, "validation_failed", message, path="traces")
        return None
    return batch["traces"]


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


def _send_error(handler, status: int, code: str, message: str, details=None, path=None) -> None:
    if path is not None:  # a refusal of the whole request names its one place, as the console
        details = [{"path": path, "code": code, "message": message}]
    body = {"error": {"code": code, "message": message, "details": details or []}}
    _send(handler, status, msgspec.json.encode(body))
