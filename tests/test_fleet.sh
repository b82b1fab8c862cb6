#!/bin/sh
# tests/test_fleet.sh — a fleet on loopback (tests/server/fleet.test.mjs): three aahd replicas behind Debian's nginx
# with the shipped deploy/nginx/aahd.conf (ports templated, nginx run as this user with a temporary prefix). Needs
# node (Node.js 20) and nginx (Debian's nginx-light or nginx; deploy/deps.sh installs it).
set -eu
BUILD=${AAH_BUILD:-build}
export AAH_BUILD="$BUILD" AAH_TESTDATA="${AAH_TESTDATA:-tests/data}"
fail() { echo "test_fleet: FAILURE: $*"; exit 1; }
command -v node >/dev/null 2>&1 || fail "node is not installed (deploy/deps.sh installs npm, which brings it)"
[ -x "${AAH_NGINX:-/usr/sbin/nginx}" ] || fail "nginx is not installed (Debian package nginx-light; deploy/deps.sh)"
[ -x "$BUILD/aahd" ] || fail "$BUILD/aahd is not built"
exec timeout -k 10 400 node --test --test-reporter=spec tests/server/fleet.test.mjs
