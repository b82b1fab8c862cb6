#!/bin/sh
# tests/test_connections.sh — the HTTP server's front through real sockets (tests/server/connections.test.mjs, Node's
# test runner): the connection limit, probe slots, deadlines, framing refusals, lingering close, half-close. Needs
# node (Node.js 20); the whole run is bounded by a timeout.
set -eu
BUILD=${AAH_BUILD:-build}
export AAH_BUILD="$BUILD" AAH_TESTDATA="${AAH_TESTDATA:-tests/data}"
if ! command -v node >/dev/null 2>&1; then
	echo "test_connections: FAILURE: node is not installed (deploy/deps.sh installs npm, which brings it)"
	exit 1
fi
if [ ! -x "$BUILD/aahd" ]; then
	echo "test_connections: FAILURE: $BUILD/aahd is not built"
	exit 1
fi
exec timeout -k 10 300 node --test --test-reporter=spec tests/server/connections.test.mjs
