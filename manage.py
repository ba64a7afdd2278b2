#!/usr/bin/env python
"""Django's command-line utility for the Context Console."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line
    from django.db.utils import OperationalError

    try:
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as exc:
        # One clear line for a configuration problem, not a traceback.
        sys.stderr.write(f"configuration error: {exc}\n")
        sys.exit(2)
    except OperationalError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        sys.stderr.write(
            f"configuration error: cannot use the database from DATABASE_URL: {first}\n"
        )
        sys.exit(2)


if __name__ == "__main__":
    main()
