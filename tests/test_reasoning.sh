#!/bin/sh
# tests/test_reasoning.sh — chat answers split into reasoning_content and content, and the turns (developer,
# continue_final_message), through real aahd daemons (tests/server/reasoning.test.mjs). Needs node (Node.js 20).
set -eu
BUILD=${AAH_BUILD:-build}
export AAH_BUILD="$BUILD" AAH_TESTDATA="${AAH_TESTDATA:-tests/data}"
fail() { echo "test_reasoning: FAILURE: $*"; exit 1; }
command -v node >/dev/null 2>&1 || fail "node is not installed (deploy/deps.sh installs npm, which brings it)"
[ -x "$BUILD/aahd" ] || fail "$BUILD/aahd is not built"
exec timeout -k 10 180 node --test --test-reporter=spec tests/server/reasoning.test.mjs
