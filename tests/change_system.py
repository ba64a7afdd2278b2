"""A change-management system on loopback for the change-approval tests
(docs/change-approvals.md): a small real HTTP service that records the console's change
requests (verifying their Standard Webhooks signature), answers status polls signed (or
forged, or unsigned), and calls the console back signed — or forged."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def sign(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """`v1,<base64 HMAC-SHA256 of "id.timestamp.body">`, written here from the spec (not the
    console's function), so a console that signs differently fails these tests."""
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(secret.encode(), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def free_port_url(path: str = "/changes") -> str:
    """A loopback URL where nothing listens: a change system that is down."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}{path}"


class ChangeSystem:
    """Requests are kept in `requests` (each: headers, body, data, verified); `answers` holds
    what a poll of a record's status gets ({"status": "waiting"} until `decide`)."""

    def __init__(self, secret: str = ""):
        self.secret = secret
        self.requests: list[dict] = []
        self.polls: list[dict] = []
        self.answers: dict[str, dict] = {}
        system = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers["Content-Length"]))
                headers = {k.lower(): v for k, v in self.headers.items()}
                system.requests.append(
                    {
                        "headers": headers,
                        "body": body,
                        "data": json.loads(body),
                        "verified": system.verifies(headers, body),
                    }
                )
                self.send_response(202)
                self.end_headers()

            def do_GET(self):  # noqa: N802
                headers = {k.lower(): v for k, v in self.headers.items()}
                record_id = self.path.rstrip("/").rsplit("/", 1)[-1]
                system.polls.append({"path": self.path, "verified": system.verifies(headers, b"")})
                answer, signing = system.answers.get(record_id, ({"status": "waiting"}, None))
                payload = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for name, value in system.signed(payload, signing).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.url = f"{base}/changes"
        self.status_url_template = f"{base}/changes/{{id}}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def verifies(self, headers: dict, body: bytes) -> bool:
        try:
            expected = sign(
                self.secret, headers["webhook-id"], int(headers["webhook-timestamp"]), body
            )
        except (KeyError, ValueError):
            return False
        return hmac.compare_digest(expected, headers.get("webhook-signature", ""))

    def decide(self, record_id: str, *, signed: bool = True, secret: str | None = None, **answer):
        """What the next poll of `record_id` (cr-N) answers: signed with the system's secret
        as a real system does, or with `secret` (forged), or not at all (`signed=False`)."""
        signing = None if not signed else (self.secret if secret is None else secret)
        self.answers[record_id] = (answer, signing)

    @staticmethod
    def signed(body: bytes, secret: str | None, timestamp: int | None = None) -> dict[str, str]:
        """Standard Webhooks headers over `body` with `secret`; none without one."""
        if secret is None:
            return {}
        stamp = int(time.time()) if timestamp is None else timestamp
        message_id = f"msg_{time.monotonic_ns()}"
        return {
            "webhook-id": message_id,
            "webhook-timestamp": str(stamp),
            "webhook-signature": sign(secret, message_id, stamp, body),
        }

    def callback(
        self,
        *,
        status: str,
        change_number: str,
        content_hash: str,
        comment: str = "",
        secret: str | None = None,
        timestamp: int | None = None,
    ) -> tuple[bytes, dict]:
        """A signed answer: (body, headers). `secret` forges it with another key; `timestamp`
        dates it."""
        body = json.dumps(
            {
                "status": status,
                "change_number": change_number,
                "content_hash": content_hash,
                "comment": comment,
            }
        ).encode()
        return body, self.signed(body, self.secret if secret is None else secret, timestamp)

    def call_back(self, callback_url: str, **answer) -> tuple[int, dict]:
        """POST a signed answer to the console over real HTTP: (status, JSON answer)."""
        body, headers = self.callback(**answer)
        request = urllib.request.Request(
            callback_url,
            data=body,
            headers={"Content-Type": "application/json", **headers},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())
