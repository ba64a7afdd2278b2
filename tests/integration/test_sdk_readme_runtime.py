"""Issue 32's first "Done when": a runtime built from `sdk/README.md` alone, against a real
console (granian web and stream servers on this test's database and Redis) with a real
all-agents token.

The runtime is the README's code, literally: `sdk/examples/runtime.py`, which the README shows
verbatim (this test checks the two are identical, as `sdk/tests/test_readme.py` does), run as
its own process with only the environment variables the README names; the test is its
application (requests on stdin, answers on stdout).

- (a) SIGTERM during a console outage, with the SDK's default settings: after the console is
  back and the runtime restarted, every answered request's trace is stored, once.
- (b) outcomes reported as the README shows (right after each answer) are all stored: none
  rejected, though the token covers every agent and most outcomes arrive before their trace.
- (c) the provider's FAQ item, of a source the strategy does not read, is in the stored trace
  as not requested, with the reason in words, counted among the candidates considered.
"""

from __future__ import annotations

import html
import importlib.util
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from strategies.runtime.models import RuntimeInstance
from tests.factories import release_setup_serving, runtime_token
from tests.factories.outcomes import outcome_kinds
from tests.factories.traces import candidates_of
from tests.runtime_sim import ROOT, wait_until
from traces.models import Trace
from traces.outcomes.models import Outcome

pytestmark = pytest.mark.django_db(transaction=True)

EXAMPLE = ROOT / "sdk" / "examples" / "runtime.py"


def readme_runtime() -> str:
    """The README's runtime block, read the way the SDK's own test reads it (one reader)."""
    spec = importlib.util.spec_from_file_location(
        "sdk_test_readme", ROOT / "sdk" / "tests" / "test_readme.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.readme_runtime()


class ReadmeRuntime:
    """`python sdk/examples/runtime.py` with CONSOLE_URL, CONSOLE_TOKEN and RUNTIME_STATE_DIR
    — nothing else set; its stderr (the SDK's log) in `log`."""

    def __init__(self, console_url: str, token: str, state: Path, log: Path):
        env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
        env.update(
            CONSOLE_URL=console_url,
            CONSOLE_TOKEN=token,
            RUNTIME_STATE_DIR=str(state),
            PYTHONUNBUFFERED="1",
        )
        self._log = open(log, "a")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, str(EXAMPLE)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            bufsize=1,
        )
        self._answers: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._answers.put(line.rstrip("\n"))

    def ask(self, count: int, timeout: float = 60.0) -> list[str]:
        """`count` requests; the request ids of the answers."""
        for i in range(count):
            self.proc.stdin.write(f"T{i % 7} Can I still return order A1042?\n")
        self.proc.stdin.flush()
        ids = []
        deadline = time.monotonic() + timeout
        while len(ids) < count:
            line = self._answers.get(timeout=max(0.1, deadline - time.monotonic()))
            request_id, _, answer = line.partition("\t")
            assert answer, line
            ids.append(request_id)
        return ids

    def sigterm(self, timeout: float = 30.0) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        finally:
            self._log.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        if not self._log.closed:
            self._log.close()


@pytest.fixture
def world(transactional_db):
    world = release_setup_serving()  # profile v1 and strategy v2 live in sg-test
    outcome_kinds(world.sg)
    world.token = runtime_token(world.sg)  # every capability, every agent of sg-test
    return world


@pytest.fixture
def console(world, console_with_stream):
    return console_with_stream  # after the world: the servers read it


@pytest.fixture
def runtimes():
    started: list[ReadmeRuntime] = []
    yield started
    for runtime in started:
        runtime.kill()


def test_readme_runtime__sigterm_in_outage_outcomes_and_foreign_item__nothing_lost_or_rejected(
    world, console, runtimes, tmp_path, client
):
    # Given the README's runtime, as written, on a real console with an all-agents token
    assert readme_runtime() == EXAMPLE.read_text()
    state = tmp_path / "state"
    first = ReadmeRuntime(console.web.url, world.token, state, tmp_path / "runtime-1.log")
    runtimes.append(first)
    answered = first.ask(10)
    assert wait_until(
        lambda: RuntimeInstance.objects.filter(runtime="after-sales-runtime 1.0").exists(), 20
    ), list(RuntimeInstance.objects.values_list("instance", "runtime"))

    # When the console stops, the runtime keeps answering from its copy of the configuration
    console.stop()
    answered += first.ask(30)
    time.sleep(0.5)  # the last answer's outcome is reported right after it is printed
    # ... and is stopped with SIGTERM while the console is still down
    assert first.sigterm() == 0
    assert sorted(os.listdir(state)) == ["console-config.json", "console-config.json.spool"]

    # Then, the console back and the runtime started again on its state directory
    console.start()
    again = ReadmeRuntime(console.web.url, world.token, state, tmp_path / "runtime-2.log")
    runtimes.append(again)
    answered += again.ask(5)
    wanted = set(answered)
    assert len(wanted) == 45

    def stored():
        return set(Trace.objects.filter(request_id__in=wanted).values_list("request_id", flat=True))

    # (a) every answered request's trace is stored, once: 0 lost
    if not wait_until(lambda: stored() == wanted, 60, 0.5):
        pytest.fail(f"{len(wanted - stored())} of 45 traces lost (logs in {tmp_path})")
    assert Trace.objects.filter(request_id__in=wanted).count() == 45

    # (b) every outcome reported as the README shows is stored: 0 rejected
    def outcomes():
        return Outcome.objects.filter(request_id__in=wanted, kind__key="task_completed")

    if not wait_until(lambda: outcomes().count() == 45, 60, 0.5):
        pytest.fail(f"{45 - outcomes().count()} of 45 outcomes not stored (logs in {tmp_path})")
    assert set(outcomes().values_list("agent__key", flat=True)) == {"assistant_professional"}
    assert again.sigterm() == 0
    log = (tmp_path / "runtime-1.log").read_text() + (tmp_path / "runtime-2.log").read_text()
    assert "rejected" not in log, log[-2000:]

    # (c) the FAQ item the policy search also found is in every trace, as not requested
    foreign = [
        c
        for c in candidates_of(Trace.objects.filter(request_id__in=wanted))
        if c.item_id == "faq:returns"
    ]
    assert len(foreign) == 45
    assert {(c.decision, c.reason_code, c.required) for c in foreign} == {
        ("not_requested", "source_not_read", False)
    }
    client.force_login(world.ops)
    page = html.unescape(
        client.get(f"/traces/{answered[0]}/", {"environment": "sg-test"}).content.decode()
    )
    assert "4 considered" in page
    assert "faq:returns" in page and "this strategy does not read faq" in page
