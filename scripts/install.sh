#!/usr/bin/env bash
# Create .venv and install the pinned dependencies from pyproject.toml (skipped when unchanged).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "Python 3.11 or newer is required (found: $("$PYTHON" --version 2>&1))" >&2; exit 1
fi
# Debian's xmlsec1: pysaml2 checks SAML sign-in signatures with it (console.accounts.saml).
if ! command -v xmlsec1 >/dev/null 2>&1; then
  echo "Installing Debian's xmlsec1 (SAML sign-in)…"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq xmlsec1 >/dev/null
fi
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
extras="${1:-}"
.venv/bin/python - "$extras" > .venv/requirements.txt <<'PY'
import sys, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
deps = list(project["dependencies"])
if sys.argv[1] == "dev":
    deps += project["optional-dependencies"]["dev"]
print("\n".join(deps))
PY
stamp=.venv/.installed-$(cat .venv/requirements.txt sdk/pyproject.toml | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -r .venv/requirements.txt
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ./sdk
  rm -f .venv/.installed-*; touch "$stamp"
fi
# The suite's local identity providers (tests/idp): npm packages pinned by its package-lock.json,
# installed here so that nothing is downloaded while the tests run.
if [ "$extras" = "dev" ]; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "Node.js and npm are needed for the tests' identity providers (apt-get install nodejs npm)" >&2; exit 1
  fi
  idp_stamp=tests/idp/node_modules/.installed-$(sha256sum tests/idp/package-lock.json | cut -c1-16)
  if [ ! -f "$idp_stamp" ]; then
    npm ci --prefix tests/idp --no-audit --no-fund --loglevel=error
    touch "$idp_stamp"
  fi
fi
