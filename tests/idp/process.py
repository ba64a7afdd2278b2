"""What the suite's local identity providers share: a child process on a free loopback port,
its files in a temporary directory, started and awaited, stopped, its stderr kept for the
failure message (tests/idp/oidc.py: Node.js's oidc-provider; tests/idp/saml_idp.py: pysaml2's
IdP)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LoopbackProcess:
    """One provider process. Subclasses call `_spawn` from their `start`."""

    label = "the identity provider"

    def __init__(self, prefix: str) -> None:
        self.port = free_port()
        self._dir = Path(tempfile.mkdtemp(prefix=prefix))
        self._process: subprocess.Popen | None = None

    def _spawn(self, args, *, ready: Callable[[], object], ready_within: float, cwd=None) -> None:
        """Start `args` and wait until `ready()` stops raising OSError."""
        self._process = subprocess.Popen(
            args,
            cwd=cwd,
            stdout=subprocess.DEVNULL,
            stderr=(self._dir / "stderr.log").open("ab"),
        )
        deadline = time.monotonic() + ready_within
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"{self.label} exited: {self.stderr()}")
            try:
                ready()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"{self.label} did not answer within {ready_within}s: {self.stderr()}")

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def start(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self._dir, ignore_errors=True)

    def stderr(self) -> str:
        path = self._dir / "stderr.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""
