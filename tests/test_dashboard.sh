#!/bin/sh
# tests/test_dashboard.sh — GET /dashboard in Debian's headless Chromium (tests/server/dashboard.test.mjs, driven over
# the DevTools protocol on a pipe). Needs node (Node.js 20) and chromium (deploy/deps.sh installs both).
set -eu
BUILD=${AAH_BUILD:-build}
export AAH_BUILD="$BUILD" AAH_TESTDATA="${AAH_TESTDATA:-tests/data}"
fail() { echo "test_dashboard: FAILURE: $*"; exit 1; }
command -v node >/dev/null 2>&1 || fail "node is not installed (deploy/deps.sh installs npm, which brings it)"
[ -x "${AAH_CHROMIUM:-/usr/bin/chromium}" ] || fail "chromium is not installed (Debian package chromium; deploy/deps.sh)"
[ -x "$BUILD/aahd" ] && [ -x "$BUILD/aah-mkmodel" ] || fail "$BUILD/aahd or $BUILD/aah-mkmodel is not built"
exec timeout -k 10 300 node --test --test-reporter=spec tests/server/dashboard.test.mjs
