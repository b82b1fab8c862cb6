#!/bin/sh
# tests/test_speculation.sh — speculative decoding through real aahd daemons (tests/server/speculation.test.mjs, Node's
# test runner): every draft kind's answers equal the answers without speculation, the metrics, the refusals, and the
# start-up checks of a draft model. Needs node (Node.js 20); the whole run is bounded by a timeout.
set -eu
BUILD=${AAH_BUILD:-build}
export AAH_BUILD="$BUILD" AAH_TESTDATA="${AAH_TESTDATA:-tests/data}"
fail() { echo "test_speculation: FAILURE: $*"; exit 1; }
command -v node >/dev/null 2>&1 || fail "node is not installed (deploy/deps.sh installs npm, which brings it)"
[ -x "$BUILD/aahd" ] && [ -x "$BUILD/aah-mkmodel" ] || fail "$BUILD/aahd or $BUILD/aah-mkmodel is not built"
exec timeout -k 10 300 node --test --test-reporter=spec tests/server/speculation.test.mjs
