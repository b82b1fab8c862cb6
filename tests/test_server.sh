#!/bin/sh
# tests/test_server.sh — the HTTP integration tests: starts real aahd daemons (port 0, the test model) from
# tests/server/integration.test.mjs and tests/server/flood.test.mjs (issue 21: 2000 idle connections) with Node's
# test runner; every daemon is stopped by the tests, and the whole run is bounded by a timeout. Needs node (Node.js
# 20) and promtool (Debian package prometheus).
set -eu
BUILD=${AAH_BUILD:-build}
export AAH_BUILD="$BUILD" AAH_TESTDATA="${AAH_TESTDATA:-tests/data}"
if ! command -v node >/dev/null 2>&1; then
	echo "test_server: FAILURE: node is not installed (deploy/deps.sh installs npm, which brings it)"
	exit 1
fi
if [ ! -x "$BUILD/aahd" ]; then
	echo "test_server: FAILURE: $BUILD/aahd is not built"
	exit 1
fi
exec timeout -k 10 300 node --test --test-reporter=spec tests/server/integration.test.mjs tests/server/flood.test.mjs
