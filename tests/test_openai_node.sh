#!/bin/sh
# tests/test_openai_node.sh — the official OpenAI Node client against a real aahd. Installs npm `openai@4` into
# the cache folder once (idempotent); when npm cannot reach its registry this test FAILS, loudly, rather than pass.
set -eu
BUILD=${AAH_BUILD:-build}
CACHE=${AAH_CACHE:-.cache}
DIR="$CACHE/node"
export AAH_BUILD="$BUILD" AAH_TESTDATA="${AAH_TESTDATA:-tests/data}" AAH_OPENAI_DIR="$DIR"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
	echo "test_openai_node: FAILURE: node and npm are needed (deploy/deps.sh installs npm)"
	exit 1
fi
# npm installs into the cache one at a time: test_openai_node, test_agent and test_agent_sdk may run at once
mkdir -p "$DIR"
exec 8>"$DIR/.install.lock"
flock 8
if [ ! -f "$DIR/node_modules/openai/package.json" ]; then
	echo "test_openai_node: installing openai@4 into $DIR"
	mkdir -p "$DIR"
	if ! timeout 300 npm install --prefix "$DIR" --no-audit --no-fund --loglevel=error openai@4; then
		echo "test_openai_node: FAILURE: npm could not install the openai package (is the registry reachable?)"
		exit 1
	fi
fi
flock -u 8
exec 8>&-
exec timeout -k 10 120 node --test --test-reporter=spec tests/server/openai_client.test.mjs tests/server/openai_chat.test.mjs
