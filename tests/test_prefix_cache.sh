#!/bin/sh
# tests/test_prefix_cache.sh — the prefix cache through real aahd daemons (tests/server/prefix_cache.test.mjs): the
# cache on and off answer the same requests with the same choices; usage, /metrics and /v1/stats count the hits.
# Needs node (Node.js 20).
set -eu
BUILD=${AAH_BUILD:-build}
export AAH_BUILD="$BUILD" AAH_TESTDATA="${AAH_TESTDATA:-tests/data}"
if ! command -v node >/dev/null 2>&1; then
	echo "test_prefix_cache: FAILURE: node is not installed (deploy/deps.sh installs npm, which brings it)"
	exit 1
fi
if [ ! -x "$BUILD/aahd" ] || [ ! -x "$BUILD/aah-mkmodel" ]; then
	echo "test_prefix_cache: FAILURE: $BUILD/aahd or $BUILD/aah-mkmodel is not built"
	exit 1
fi
# the whole file's bound: four times as long under the sanitizers
LIMIT=420
case "$BUILD" in */san) LIMIT=1680 ;; esac
exec timeout -k 10 "$LIMIT" node --test --test-reporter=spec tests/server/prefix_cache.test.mjs
