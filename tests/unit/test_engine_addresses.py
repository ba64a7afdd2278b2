"""No test guesses where PostgreSQL or Redis listen (issue 18).

A child process that connects to 127.0.0.1:5432 or :6379 passes on a machine with servers
there and fails on the embedded engines (unix sockets). Every child gets the test process's
engines from tests/engines.py; this keeps the ports out of the tests. The benchmarks
(tests/bench, `make bench`) are not part of the suite.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.engines import database_url, machine_servers_in_use, pg_connect_kwargs

TESTS = Path(__file__).resolve().parent.parent
ENGINE_PORTS = {5432, 6379}
ENGINE_PORT_IN_TEXT = re.compile(r":(5432|6379)\b")
# Where a port is data, not an address to connect to: webhook targets the console refuses.
NOT_ADDRESSES = {
    ("integration/test_webhook_targets.py", "http://127.0.0.1:5432/"),
    ("integration/test_webhook_targets.py", "http://localhost:6379/"),
}


def _docstrings(tree: ast.AST) -> set[int]:
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }


def test_no_test_names_the_default_postgresql_or_redis_port():
    """In code, not prose: the port as a number (`port=5432`, `or 5432`) or in a string
    (`"redis://127.0.0.1:6379/1"`)."""
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        relative = path.relative_to(TESTS).as_posix()
        if relative.startswith("bench/") or path == Path(__file__).resolve():
            continue
        tree = ast.parse(path.read_text())
        prose = _docstrings(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Constant) or id(node) in prose:
                continue
            value = node.value
            if (type(value) is int and value in ENGINE_PORTS) or (
                isinstance(value, str)
                and ENGINE_PORT_IN_TEXT.search(value)
                and (relative, value) not in NOT_ADDRESSES
            ):
                found.append(f"tests/{relative}:{node.lineno}: {value!r}")
    assert found == [], "use tests.engines (child_env, pg_connect_kwargs) instead:\n" + "\n".join(
        found
    )


def _settings(url: str) -> dict:
    import dj_database_url

    return dj_database_url.parse(url)


def test_child_database_url__tcp__keeps_host_port_and_password():
    db = _settings("postgresql://app:s%40cret@db.example:6000/console")
    db["NAME"] = "test_console"
    assert database_url(db) == "postgresql://app:s%40cret@db.example:6000/test_console"
    assert machine_servers_in_use(db, "redis://db.example:7000/1") == [
        "PostgreSQL over TCP (db.example:6000)",
        "Redis over TCP (redis://db.example:7000/1)",
    ]


def test_child_database_url__socket_in_query__is_not_lost():
    """The embedded engine's form: HOST is empty, the socket directory is in OPTIONS."""
    db = _settings("postgresql://postgres@/postgres?host=/tmp/a%20b/postgres")
    db["NAME"] = "test_postgres"
    assert db["HOST"] == ""
    url = database_url(db)
    assert url == "postgresql://postgres@/test_postgres?host=%2Ftmp%2Fa+b%2Fpostgres"
    again = _settings(url)
    assert pg_connect_kwargs(again) == pg_connect_kwargs(db)
    assert pg_connect_kwargs(db)["host"] == "/tmp/a b/postgres"
    assert machine_servers_in_use(db, "redis+socket:///tmp/a b/redis.sock") == []


def test_child_database_url__socket_as_host__and_default_socket():
    db = _settings("postgresql://postgres@%2Frun%2Fpg/console")
    assert db["HOST"] == "/run/pg"
    assert database_url(db) == "postgresql://postgres@/console?host=%2Frun%2Fpg"
    assert database_url(_settings("postgresql://postgres@/console")) == (
        "postgresql://postgres@/console"
    )


def test_probe_role_kwargs__override_user_and_drop_password():
    db = _settings("postgresql://app:pw@db.example:6000/console?sslmode=require")
    assert pg_connect_kwargs(db, user="probe", password=None) == {
        "sslmode": "require",
        "dbname": "console",
        "user": "probe",
        "host": "db.example",
        "port": 6000,
    }
