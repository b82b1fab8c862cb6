#!/bin/sh
# tests/test_agent.sh — an agent loop (a forced tool call, its result sent back, an answer) through the official OpenAI
# Node client on the trained demo model (tests/server/agent.test.mjs). Installs npm openai@4 into the cache folder
# when it is not there (as tests/test_openai_node.sh does); when npm cannot reach its registry this test FAILS.
set -eu
BUILD=${AAH_BUILD:-build}
CACHE=${AAH_CACHE:-.cache}
DIR="$CACHE/node"
export AAH_BUILD="$BUILD" AAH_TESTDATA="${AAH_TESTDATA:-tests/data}" AAH_OPENAI_DIR="$DIR"
fail() { echo "test_agent: FAILURE: $*"; exit 1; }
command -v node >/dev/null 2>&1 || fail "node is not installed (deploy/deps.sh installs npm, which brings it)"
[ -x "$BUILD/aahd" ] && [ -x "$BUILD/aah-convert" ] || fail "$BUILD/aahd and $BUILD/aah-convert are not built"
command -v npm >/dev/null 2>&1 || fail "npm is not installed (deploy/deps.sh installs it)"
# npm installs into the cache one at a time: test_openai_node, test_agent and test_agent_sdk may run at once
mkdir -p "$DIR"
exec 8>"$DIR/.install.lock"
flock 8
if [ ! -f "$DIR/node_modules/openai/package.json" ]; then
	echo "test_agent: installing openai@4 into $DIR"
	mkdir -p "$DIR"
	timeout 300 npm install --prefix "$DIR" --no-audit --no-fund --loglevel=error openai@4 ||
		fail "npm could not install the openai package (is the registry reachable?)"
fi
flock -u 8
exec 8>&-
exec timeout -k 10 180 node --test --test-reporter=spec tests/server/agent.test.mjs
