#!/usr/bin/env bash
# Install, migrate, load the demo world, and start web + Celery worker + beat + demo traffic
# on http://$HOST:$PORT (default 127.0.0.1:8000). Without DATABASE_URL / REDIS_URL, embedded
# PostgreSQL and Redis start with data in .data/ (or $CONSOLE_DATA_DIR). Ctrl-C stops all of
# them (scripts/run.py); `make stop` stops whatever a crashed run left.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh
exec .venv/bin/python scripts/run.py "$@"
