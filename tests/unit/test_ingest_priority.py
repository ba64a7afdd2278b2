"""The ingest server's processes yield the cores to the web server (issue 36, item 2): its
threads, those there at start-up and each that serves a request later, run at INGEST_NICE
and on INGEST_CPUS, so a flood of batches keeps off the cores config reads are answered on.
Checked in a process of its own: lowering is one-way for an unprivileged process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import ROOT

PROBE = """
import json, os, threading
import django; django.setup()
from console.ingest_server import IngestOnly, lower_priority

def state():
    return [
        os.getpriority(os.PRIO_PROCESS, 0),
        os.sched_getscheduler(0),
        sorted(os.sched_getaffinity(0)),
    ]

before = state()
lower_priority()
at_start = state()
seen = {}

def app(environ, start_response):
    seen["serving"] = state()
    start_response("200 OK", [])
    return [b""]

def serve():
    IngestOnly(app)({"REQUEST_METHOD": "GET", "PATH_INFO": "/healthz"}, lambda *a: None)

thread = threading.Thread(target=serve)
thread.start(); thread.join()
print(json.dumps({"before": before, "at_start": at_start, **seen}))
"""


def _probe(**settings_env) -> dict:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "console.settings", **settings_env}
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


ALL = sorted(os.sched_getaffinity(0))
# The normal class: a SCHED_IDLE server starved on busy cores was still exiting, its port
# held, when `make run` started again.
OTHER = os.SCHED_OTHER


def test_ingest_threads__lowered_at_start_and_when_serving__nice_in_the_normal_class():
    seen = _probe(INGEST_NICE="10", INGEST_CPUS="")
    assert seen["before"] == [0, OTHER, ALL]
    assert seen["at_start"] == [10, OTHER, ALL]
    # A thread serving a request (granian's are started by its runtime) runs lowered too.
    assert seen["serving"] == [10, OTHER, ALL]


def test_ingest_threads__ingest_cpus__kept_on_those_cpus():
    last = ALL[-1]
    seen = _probe(INGEST_NICE="0", INGEST_CPUS=str(last))
    assert seen["before"] == [0, OTHER, ALL]
    assert seen["at_start"] == [0, OTHER, [last]]
    assert seen["serving"] == [0, OTHER, [last]]


def test_ingest_threads__nice_zero_no_cpus__left_as_the_web_server():
    seen = _probe(INGEST_NICE="0", INGEST_CPUS="")
    assert seen["at_start"] == [0, OTHER, ALL]
    assert seen["serving"] == [0, OTHER, ALL]
