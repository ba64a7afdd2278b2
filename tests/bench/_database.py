"""What every benchmark with a database of its own does, in one place: a fresh database on the
server of DATABASE_URL (named per script; each script lets an environment variable rename it,
so two checkouts can bench on one server), migrated; Django set up on it in this process;
dropped at the end unless kept; and the machine line every benchmark prints first."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlparse, urlunparse

ROOT = Path(__file__).resolve().parents[2]


class BenchDatabase:
    """``url``: the bench database's; ``admin_url``: the server's ``postgres`` database, where
    it is created and dropped."""

    def __init__(self, name: str):
        self.name = name
        url = os.environ.get("DATABASE_URL") or "postgresql://postgres@127.0.0.1:5432/postgres"
        parts = urlparse(url)
        self.admin_url = urlunparse(parts._replace(path="/postgres"))
        self.url = urlunparse(parts._replace(path="/" + name))

    def admin_sql(self, statement: str) -> None:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(statement)

    def create(self, *commands: tuple[str, ...], env: dict | None = None) -> None:
        """Drop it if it is there, create it, and run ``manage.py migrate`` on it (in a
        child process: this one may not have Django set up yet), then ``commands``."""
        self.drop()
        self.admin_sql(f'CREATE DATABASE "{self.name}"')
        child_env = {**os.environ, **(env or {}), "DATABASE_URL": self.url}
        for command in (("migrate", "-v", "0"), *commands):
            subprocess.run(
                [sys.executable, "manage.py", *command],
                cwd=ROOT,
                env=child_env,
                check=True,
                stdout=subprocess.DEVNULL,
            )

    def drop(self) -> None:
        """Close this process's connections (if Django is set up) and drop the database."""
        if "django.db" in sys.modules:
            from django.conf import settings

            if settings.configured:
                from django.db import connections

                connections.close_all()
        self.admin_sql(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


def django_setup(url: str, **environment: str) -> None:
    """Set Django up in this process on ``url``, with DEBUG off (its query log would be
    measured too) and ``environment`` added to the process's environment first."""
    os.environ.update({"DATABASE_URL": url, "DEBUG": "false", **environment})
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def print_machine(detail: str) -> None:
    """The first two lines of every benchmark's output: the machine, then the date and
    ``detail`` (the database, or the load)."""
    print(f"machine: {platform.node()} · {os.cpu_count()} cores · {platform.platform()}")
    print(f"date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC · {detail}", flush=True)
