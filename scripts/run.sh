#!/usr/bin/env bash
# Install, migrate, load the demo world, and start web + Celery worker + beat.
# Without DATABASE_URL / REDIS_URL, embedded PostgreSQL and Redis start with data in .data/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh
exec .venv/bin/python scripts/run.py "$@"
