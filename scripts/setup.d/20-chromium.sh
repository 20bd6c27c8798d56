#!/usr/bin/env bash
# Headless Chromium for the dashboard's Playwright tests (tests/web): Debian's `chromium` package, driven by
# the Python `playwright` package (pinned in pyproject's dev extra) through `executable_path`; Playwright's
# own browser download is never used. Idempotent: a second run only checks that the binary starts.
# Prints `export MINIHERMES_CHROMIUM=/usr/bin/chromium` on stdout; progress goes to stderr.
set -euo pipefail

CHROMIUM="${MINIHERMES_CHROMIUM:-/usr/bin/chromium}"
if [ ! -x "$CHROMIUM" ]; then
  if [ "$(id -u)" != "0" ] && ! command -v sudo >/dev/null 2>&1; then
    echo "20-chromium: $CHROMIUM missing and not root: the Playwright tests will skip" >&2
    exit 0
  fi
  SUDO=""
  [ "$(id -u)" = "0" ] || SUDO="sudo"
  echo "20-chromium: installing Debian's chromium with apt-get" >&2
  $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
    chromium fonts-dejavu-core >&2
fi
if ! "$CHROMIUM" --headless --no-sandbox --disable-gpu --version >/dev/null 2>&1; then
  echo "20-chromium: $CHROMIUM does not start: the Playwright tests will skip" >&2
  exit 0
fi
echo "20-chromium: $("$CHROMIUM" --version 2>/dev/null)" >&2
echo "export MINIHERMES_CHROMIUM=$CHROMIUM"
