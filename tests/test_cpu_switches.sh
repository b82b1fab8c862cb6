#!/bin/sh
# tests/test_cpu_switches.sh — aahd's cpu_amx and cpu_bf16 keys through a real socket (tests/server/cpu_switches.test.mjs):
# a key overrides the environment variable, auto leaves it, /v1/stats and the load line say the choice, bad values
# are refused naming the key. Needs node (Node.js 20).
set -eu
BUILD=${AAH_BUILD:-build}
export AAH_BUILD="$BUILD" AAH_TESTDATA="${AAH_TESTDATA:-tests/data}"
fail() { echo "test_cpu_switches: FAILURE: $*"; exit 1; }
command -v node >/dev/null 2>&1 || fail "node is not installed (deploy/deps.sh installs npm, which brings it)"
[ -x "$BUILD/aahd" ] || fail "$BUILD/aahd is not built"
exec timeout -k 10 300 node --test --test-reporter=spec tests/server/cpu_switches.test.mjs
