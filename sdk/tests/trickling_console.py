"""A hostile console on loopback: it reads the request, then answers one byte at a time
("slow loris"), each byte well within any per-read timeout, so only a deadline for the whole
request ends it.

``trickle`` picks where the slowness is: ``"headers"`` (from the status line on) or
``"body"`` (status line and headers at once, then the body byte by byte). ``answer_normally``
serves the next requests at full speed (to give a client its first good copy).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import msgspec

HEADERS = "headers"
BODY = "body"


class TricklingConsole:
    def __init__(self, body: bytes = b"{}", *, every: float = 0.3, give_up_after: float = 6.0):
        self.body = body
        self.every = every  # seconds between two bytes
        self.give_up_after = give_up_after  # the server stops trickling (bounds a failing test)
        self.trickle = HEADERS
        self.answer_normally = 0
        self.requests = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}/"

    def serve_json(self, value) -> None:
        self.body = msgspec.json.encode(value)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self._listener.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            conn.settimeout(2.0)
            request = b""
            while b"\r\n\r\n" not in request:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                request += chunk
            self.requests += 1
            head = (
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(self.body)}\r\nConnection: close\r\n\r\n"
            ).encode()
            if self.answer_normally > 0:
                self.answer_normally -= 1
                conn.sendall(head + self.body)
                return
            slow = head + self.body if self.trickle == HEADERS else self.body
            if self.trickle == BODY:
                conn.sendall(head)
            started = time.monotonic()
            for i in range(len(slow)):
                if self._stop.is_set() or time.monotonic() - started > self.give_up_after:
                    return
                conn.sendall(slow[i : i + 1])
                time.sleep(self.every)
