#!/bin/sh
# tests/test_batching.sh — continuous batching through real aahd daemons (tests/server/batching.test.mjs, Node's test
# runner): concurrent clients equal to lone runs, shared prefills, 429 floods, cancellation freeing pages, admission
# under a KV budget. Needs node (Node.js 20); the whole run is bounded by a timeout.
set -eu
BUILD=${AAH_BUILD:-build}
export AAH_BUILD="$BUILD" AAH_TESTDATA="${AAH_TESTDATA:-tests/data}"
if ! command -v node >/dev/null 2>&1; then
	echo "test_batching: FAILURE: node is not installed (deploy/deps.sh installs npm, which brings it)"
	exit 1
fi
if [ ! -x "$BUILD/aahd" ] || [ ! -x "$BUILD/aah-mkmodel" ]; then
	echo "test_batching: FAILURE: $BUILD/aahd or $BUILD/aah-mkmodel is not built"
	exit 1
fi
exec timeout -k 10 300 node --test --test-reporter=spec tests/server/batching.test.mjs
