#!/usr/bin/env bash
# What the suite needs installed: .venv with the pinned dependencies (scripts/install.sh dev) and
# Debian's chromium for the browser tests. Both steps are no-ops when already done.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh dev
if ! command -v chromium >/dev/null 2>&1; then
  echo "Installing Debian's chromium for the browser tests…"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi
