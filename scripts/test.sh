#!/usr/bin/env bash
# Install everything and run the whole suite: lint, schema validation, pytest.
# Uses DATABASE_URL / REDIS_URL when set, else PostgreSQL on 127.0.0.1:5432 and Redis on
# 127.0.0.1:6379 when they answer, else the embedded engines. CONSOLE_TEST_ENGINES=embedded
# ignores all of those and uses the embedded engines alone (as on a machine without servers;
# CI runs both ways). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/test-setup.sh

# At exit: stop the SDK's suite if it still runs, release the embedded engines if started here.
sdk_pid="" embedded=""
cleanup() {
  if [ -n "$sdk_pid" ]; then kill "$sdk_pid" 2>/dev/null || true; fi
  if [ -n "$embedded" ]; then .venv/bin/python scripts/embedded.py release $$ || true; fi
}
trap cleanup EXIT

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
  embedded=1
  eval "$embedded_env"
fi
echo "database: $DATABASE_URL  broker: $REDIS_URL"

mkdir -p .data
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/lint-imports

# The runtime SDK on its own: a clean virtual environment with only sdk/ (no Django). Its suite
# runs beside the console's (each mostly keeps one core busy); its output follows the console's.
# SKIP_SDK_SUITE=1 leaves it out (CI's embedded-engines pass: the SDK touches no engine).
if [ -z "${SKIP_SDK_SUITE:-}" ]; then
  [ -x .venv-sdk/bin/python ] || python3 -m venv .venv-sdk
  # setuptools never prunes sdk/build/: a module renamed or removed since would ship in the wheel.
  rm -rf sdk/build
  .venv-sdk/bin/python -m pip install --quiet --disable-pip-version-check "./sdk[test,adk]"
  sdk_log=.data/sdk-tests-$$.log
  (cd sdk && exec ../.venv-sdk/bin/python -m pytest -q) > "$sdk_log" 2>&1 &
  sdk_pid=$!
fi

status=0
.venv/bin/python manage.py spectacular --validate --fail-on-warn --file .data/openapi-$$.yaml || status=$?
rm -f .data/openapi-$$.yaml
[ $status -ne 0 ] || .venv/bin/python -m pytest "$@" || status=$?

if [ -n "$sdk_pid" ]; then
  sdk_status=0
  wait "$sdk_pid" || sdk_status=$?
  echo "=== the runtime SDK's suite (sdk/tests), run beside the console's"
  cat "$sdk_log"; rm -f "$sdk_log"
  sdk_pid=""
  [ $sdk_status -eq 0 ] || { echo "the SDK's suite failed" >&2; status=1; }
fi
exit $status
