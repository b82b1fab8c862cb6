#!/bin/sh
# tests/test_agent.sh — an agent loop (a forced tool call, its result sent back, an answer) through the official OpenAI
# Node client on the trained demo model (tests/server/agent.test.mjs). Uses the openai@4 package that
# tests/test_openai_node.sh installs into the cache folder; without it this test SKIPS, saying so.
set -eu
BUILD=${AAH_BUILD:-build}
CACHE=${AAH_CACHE:-.cache}
DIR="$CACHE/node"
export AAH_BUILD="$BUILD" AAH_TESTDATA="${AAH_TESTDATA:-tests/data}" AAH_OPENAI_DIR="$DIR"
fail() { echo "test_agent: FAILURE: $*"; exit 1; }
command -v node >/dev/null 2>&1 || fail "node is not installed (deploy/deps.sh installs npm, which brings it)"
[ -x "$BUILD/aahd" ] && [ -x "$BUILD/aah-convert" ] || fail "$BUILD/aahd and $BUILD/aah-convert are not built"
if [ ! -f "$DIR/node_modules/openai/package.json" ]; then
	echo "test_agent: SKIPPED: the openai package is not in $DIR (tests/test_openai_node.sh installs it)"
	exit 0
fi
exec timeout -k 10 180 node --test --test-reporter=spec tests/server/agent.test.mjs
