#!/usr/bin/env bash
# What the suite needs installed: Debian's chromium for the browser tests, Node.js with npm
# for the tests' local identity providers (tests/idp) and xmlsec1 for SAML's signatures, then
# .venv with the pinned dependencies and the identity providers' npm packages
# (scripts/install.sh dev). Each step is a no-op when done.
set -euo pipefail
cd "$(dirname "$0")/.."
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
command -v xmlsec1 >/dev/null 2>&1 || missing+=(xmlsec1)  # SAML signatures (pysaml2)
if [ ${#missing[@]} -gt 0 ]; then
  echo "Installing Debian's ${missing[*]} for the tests…"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
scripts/install.sh dev
