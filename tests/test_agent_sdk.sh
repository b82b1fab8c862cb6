#!/bin/sh
# tests/test_agent_sdk.sh — an agent loop through the Vercel AI SDK (generateText and streamText with a tool, on the
# trained demo model: tests/server/agent_sdk.test.mjs). Installs npm `ai@6`, `@ai-sdk/openai-compatible@2` and `zod@4`
# into the cache folder once (idempotent; `ai@7` needs Node 22); when npm cannot reach its registry this test FAILS,
# loudly, rather than pass.
set -eu
BUILD=${AAH_BUILD:-build}
CACHE=${AAH_CACHE:-.cache}
DIR="$CACHE/node"
export AAH_BUILD="$BUILD" AAH_TESTDATA="${AAH_TESTDATA:-tests/data}" AAH_OPENAI_DIR="$DIR"
fail() { echo "test_agent_sdk: FAILURE: $*"; exit 1; }
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
	fail "node and npm are needed (deploy/deps.sh installs npm)"
fi
[ -x "$BUILD/aahd" ] && [ -x "$BUILD/aah-convert" ] || fail "$BUILD/aahd and $BUILD/aah-convert are not built"
# npm installs into the cache one at a time: test_openai_node, test_agent and test_agent_sdk may run at once
mkdir -p "$DIR"
exec 8>"$DIR/.install.lock"
flock 8
if [ ! -f "$DIR/node_modules/ai/package.json" ] || [ ! -f "$DIR/node_modules/@ai-sdk/openai-compatible/package.json" ] ||
	[ ! -f "$DIR/node_modules/zod/package.json" ]; then
	echo "test_agent_sdk: installing ai@6, @ai-sdk/openai-compatible@2 and zod@4 into $DIR"
	mkdir -p "$DIR"
	if ! timeout 300 npm install --prefix "$DIR" --no-audit --no-fund --loglevel=error ai@6 @ai-sdk/openai-compatible@2 zod@4; then
		fail "npm could not install ai, @ai-sdk/openai-compatible and zod (is the registry reachable?)"
	fi
fi
flock -u 8
exec 8>&-
exec timeout -k 10 180 node --test --test-reporter=spec tests/server/agent_sdk.test.mjs
