#!/bin/sh
# tests/test_tools.sh — tool calls in chat answers (tool_choice auto, none, required, a named function;
# parallel_tool_calls; invalid arguments on /metrics) through real aahd daemons (tests/server/tools.test.mjs). Needs
# node (Node.js 20).
set -eu
BUILD=${AAH_BUILD:-build}
export AAH_BUILD="$BUILD" AAH_TESTDATA="${AAH_TESTDATA:-tests/data}"
fail() { echo "test_tools: FAILURE: $*"; exit 1; }
command -v node >/dev/null 2>&1 || fail "node is not installed (deploy/deps.sh installs npm, which brings it)"
[ -x "$BUILD/aahd" ] && [ -x "$BUILD/aah-convert" ] || fail "$BUILD/aahd and $BUILD/aah-convert are not built"
exec timeout -k 10 240 node --test --test-reporter=spec tests/server/tools.test.mjs
