"""The runtime contract's examples as data (``contract/*.json``, docs/runtime-contract.md),
and the one routine that runs them against a console.

Both consoles answer the same files: the real one in the console's
``tests/integration/test_runtime_contract_examples.py``, the SDK's fake one in
``test_contract_examples.py``; so the fake cannot drift from the real one unnoticed.

A file holds ``exchanges``, run in order against a fresh console. Each has a ``request``
(``method``, ``path``, ``headers``, and a JSON ``body`` or a ``raw_body`` string), an optional
``capture`` (variable ← response header) and the expected ``response``: ``status``,
``headers`` (exact; Content-Type by media type), and ``body`` (exact JSON), ``body_has``
(the fields that must be there; lists compare item by item, ``"*"`` is any value) or
``empty_body``. A request with ``"stream": true`` opens the config stream (§1a): ``send`` is
called with ``stream=True`` and returns what arrived within a moment (the stream stays open,
so the answer is the beginning of it); ``events`` is then the exact list of its server-sent
events (``id``, ``event``, ``data`` as JSON; comments and ``retry`` left out), ``[]`` when
none must come. ``{name}`` in a string is a variable: ``token``, ``occurred_at`` (a minute
ago), a captured header, or what the console under test gives (``environment``,
``profile_version``); a string that is only ``{name}`` takes the variable's type.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

CONTRACT_DIR = Path(__file__).parent / "contract"
ANY = "*"


@dataclass
class Answer:
    status: int
    headers: Mapping[str, str]  # names in lower case
    body: bytes


# send(method, path, headers, body[, stream=True]) → the console's answer
Send = Callable[..., Answer]

# How long a stream request is read before its answer is judged: the first event comes at
# once (it is written with the response's head), so this only bounds the wait for "none".
STREAM_READ_SECONDS = 0.6


def example_names() -> list[str]:
    return sorted(path.stem for path in CONTRACT_DIR.glob("*.json"))


def load_example(name: str) -> dict:
    return json.loads((CONTRACT_DIR / f"{name}.json").read_text())


def run_example(name: str, send: Send, variables: Mapping[str, object]) -> None:
    """Run every exchange of ``contract/<name>.json``; an AssertionError names what differs."""
    known = {
        "occurred_at": (datetime.now(UTC) - timedelta(minutes=1)).isoformat(),
        **variables,
    }
    for number, exchange in enumerate(load_example(name)["exchanges"], start=1):
        request = _substitute(exchange["request"], known)
        where = f"{name}, exchange {number} ({request['method']} {request['path']})"
        if "raw_body" in request:
            data = request["raw_body"].encode()
        elif "body" in request:
            data = json.dumps(request["body"]).encode()
        else:
            data = b""
        extra = {"stream": True} if request.get("stream") else {}
        answer = send(request["method"], request["path"], request.get("headers", {}), data, **extra)
        for variable, header in exchange.get("capture", {}).items():
            assert header.lower() in answer.headers, f"{where}: no {header} header"
            known[variable] = answer.headers[header.lower()]
        _check(where, _substitute(exchange["response"], known), answer)


def _check(where: str, expected: dict, answer: Answer) -> None:
    assert answer.status == expected["status"], (
        f"{where}: status {answer.status}, expected {expected['status']}: {answer.body[:300]!r}"
    )
    for header, value in expected.get("headers", {}).items():
        actual = answer.headers.get(header.lower())
        if header.lower() == "content-type" and actual is not None:
            actual = actual.split(";")[0].strip()
        assert actual == value, f"{where}: header {header} is {actual!r}, expected {value!r}"
    if expected.get("empty_body"):
        assert answer.body == b"", f"{where}: expected no body, got {answer.body[:300]!r}"
    if "body" in expected:
        assert json.loads(answer.body) == expected["body"], f"{where}: body {answer.body!r}"
    if "body_has" in expected:
        problems = list(_missing(expected["body_has"], json.loads(answer.body), "body"))
        assert not problems, f"{where}: " + "; ".join(problems)
    if "events" in expected:
        events = parse_events(answer.body)
        assert events == expected["events"], f"{where}: events {events!r}, body {answer.body!r}"


def parse_events(raw: bytes) -> list[dict]:
    """The complete server-sent events in ``raw`` (WHATWG HTML §9.2): ``{"id", "event",
    "data"}`` each, ``data`` decoded as JSON; comments, ``retry`` and a torn tail left out."""
    events = []
    for block in raw.decode("utf-8", "replace").replace("\r\n", "\n").split("\n\n")[:-1]:
        fields: dict = {}
        for line in block.split("\n"):
            if not line or line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "data":
                fields["data"] = fields.get("data", "") + value
            elif name in ("id", "event"):
                fields[name] = value
        if "data" in fields:
            fields["data"] = json.loads(fields["data"])
            events.append(fields)
    return events


def _missing(expected, actual, path: str):
    """Where ``actual`` lacks what ``expected`` asks for."""
    if expected == ANY:
        return
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            yield f"{path} is {actual!r}, expected an object"
            return
        for key, value in expected.items():
            if key not in actual:
                yield f"{path}.{key} is missing"
            else:
                yield from _missing(value, actual[key], f"{path}.{key}")
    elif isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            yield f"{path} is {actual!r}, expected {len(expected)} items like {expected!r}"
            return
        for index, (want, got) in enumerate(zip(expected, actual, strict=True)):
            yield from _missing(want, got, f"{path}[{index}]")
    elif actual != expected:
        yield f"{path} is {actual!r}, expected {expected!r}"


def _substitute(value, variables: Mapping[str, object]):
    if isinstance(value, dict):
        return {key: _substitute(item, variables) for key, item in value.items()}
    if isinstance(value, list):
        return [_substitute(item, variables) for item in value]
    if isinstance(value, str):
        for name, replacement in variables.items():
            if value == f"{{{name}}}":
                return replacement
            value = value.replace(f"{{{name}}}", str(replacement))
    return value
