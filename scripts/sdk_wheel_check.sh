#!/usr/bin/env bash
# Build the runtime SDK's wheel and sdist, install the wheel into a clean virtual environment
# with one google-adk version, and run the ADK example against a console.
#
#   scripts/sdk_wheel_check.sh [GOOGLE_ADK_VERSION]     # default: the newest the index has
#
# The example talks to CONSOLE_URL / CONSOLE_TOKEN when set (a live console), else to the
# SDK's fake console on loopback. WHEEL_CHECK_DIR keeps the build and the venv (default: a
# temporary directory, removed at the end). PYTHON picks the interpreter (default python3).
set -euo pipefail
cd "$(dirname "$0")/.."
adk_version="${1:-}"
python="${PYTHON:-python3}"
work="${WHEEL_CHECK_DIR:-$(mktemp -d)}"
[ -n "${WHEEL_CHECK_DIR:-}" ] || trap 'rm -rf "$work"' EXIT
mkdir -p "$work"

echo "== build (sdist and wheel) into $work/dist"
"$python" -m venv "$work/build-env"
"$work/build-env/bin/pip" install --quiet --disable-pip-version-check build 2>&1 \
  | grep -v "^WARNING: Location" || true
rm -rf sdk/build
"$work/build-env/bin/python" -m build --outdir "$work/dist" sdk >"$work/build.log" 2>&1 \
  || { tail -30 "$work/build.log"; exit 1; }
wheel=$(ls "$work"/dist/context_console_runtime-*.whl)
ls "$work"/dist

echo "== clean venv: $(basename "$wheel")[adk] with google-adk ${adk_version:-(newest)}"
rm -rf "$work/venv"
"$python" -m venv "$work/venv"
spec="google-adk"
[ -z "$adk_version" ] || spec="google-adk==$adk_version"
"$work/venv/bin/pip" install --quiet --disable-pip-version-check "${wheel}[adk]" "$spec" 2>&1 \
  | grep -v "^WARNING: Location" || true
"$work/venv/bin/python" -c "import google.adk, context_runtime" \
  || { echo "the wheel or google-adk does not import"; exit 1; }

echo "== the ADK example against ${CONSOLE_URL:-the fake console}"
"$work/venv/bin/python" sdk/tests/wheel_check.py
