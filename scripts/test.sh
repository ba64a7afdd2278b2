#!/usr/bin/env bash
# Install everything and run the whole suite: lint, schema validation, pytest.
# Uses DATABASE_URL / REDIS_URL when set, else PostgreSQL on 127.0.0.1:5432 and Redis on
# 127.0.0.1:6379 when they answer, else the embedded engines. CONSOLE_TEST_ENGINES=embedded
# ignores all of those and uses the embedded engines alone (as on a machine without servers;
# CI runs both ways). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh dev

if ! command -v chromium >/dev/null 2>&1; then
  echo "Installing Debian's chromium for the browser tests…"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi

case "${CONSOLE_TEST_ENGINES:-}" in
  embedded) unset DATABASE_URL REDIS_URL ;;
  "") ;;
  *) echo "CONSOLE_TEST_ENGINES must be 'embedded' or unset, not '$CONSOLE_TEST_ENGINES'" >&2; exit 2 ;;
esac
answers() { .venv/bin/python -c "import socket,sys; s=socket.socket(); s.settimeout(1); sys.exit(s.connect_ex(('127.0.0.1', $1)))"; }
if [ -z "${CONSOLE_TEST_ENGINES:-}" ]; then
  if [ -z "${DATABASE_URL:-}" ] && answers 5432; then export DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres; fi
  if [ -z "${REDIS_URL:-}" ] && answers 6379; then export REDIS_URL=redis://127.0.0.1:6379/1; fi
fi
if [ -z "${DATABASE_URL:-}" ] || [ -z "${REDIS_URL:-}" ]; then
  echo "Starting the embedded PostgreSQL and Redis (data in .data/)…"
  # Registered for this shell: at exit they stop, unless a `make run` still uses them.
  embedded_env=$(.venv/bin/python scripts/embedded.py env --for $$)
  trap '.venv/bin/python scripts/embedded.py release $$ || true' EXIT
  eval "$embedded_env"
fi
echo "database: $DATABASE_URL  broker: $REDIS_URL"

mkdir -p .data
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/lint-imports

# The runtime SDK on its own: a clean virtual environment with only sdk/ (no Django).
[ -x .venv-sdk/bin/python ] || python3 -m venv .venv-sdk
# setuptools never prunes sdk/build/: a module renamed or removed since would ship in the wheel.
rm -rf sdk/build
.venv-sdk/bin/python -m pip install --quiet --disable-pip-version-check "./sdk[test,adk]"
(cd sdk && ../.venv-sdk/bin/python -m pytest -q)
.venv/bin/python manage.py spectacular --validate --fail-on-warn --file .data/openapi.yaml
.venv/bin/python -m pytest "$@"
