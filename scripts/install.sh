#!/usr/bin/env bash
# Create .venv and install the pinned dependencies from pyproject.toml (skipped when unchanged).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "Python 3.11 or newer is required (found: $("$PYTHON" --version 2>&1))" >&2; exit 1
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
