#!/bin/sh
# tests/test_stats.sh — GET /v1/stats and GET /dashboard through a real socket (tests/server/stats.test.mjs): the
# figures of /metrics, the regimes. layouts, the API key rule, X-Request-Id. Needs node (Node.js 20).
set -eu
BUILD=${AAH_BUILD:-build}
export AAH_BUILD="$BUILD" AAH_TESTDATA="${AAH_TESTDATA:-tests/data}"
fail() { echo "test_stats: FAILURE: $*"; exit 1; }
command -v node >/dev/null 2>&1 || fail "node is not installed (deploy/deps.sh installs npm, which brings it)"
[ -x "$BUILD/aahd" ] && [ -x "$BUILD/aah-mkmodel" ] || fail "$BUILD/aahd or $BUILD/aah-mkmodel is not built"
exec timeout -k 10 300 node --test --test-reporter=spec tests/server/stats.test.mjs
