#!/bin/sh
# tests/test_sampling.sh — the sampling fields through a real socket (tests/server/sampling.test.mjs): logit_bias,
# repetition_penalty, min_tokens, ignore_eos, stop_token_ids on both endpoints, their refusals, and the same answers
# from a daemon that draws from each row's candidates (AAH_DEVICE_SAMPLING=1). Needs node (Node.js 20).
set -eu
BUILD=${AAH_BUILD:-build}
export AAH_BUILD="$BUILD" AAH_TESTDATA="${AAH_TESTDATA:-tests/data}"
fail() { echo "test_sampling: FAILURE: $*"; exit 1; }
command -v node >/dev/null 2>&1 || fail "node is not installed (deploy/deps.sh installs npm, which brings it)"
[ -x "$BUILD/aahd" ] || fail "$BUILD/aahd is not built"
exec timeout -k 10 240 node --test --test-reporter=spec tests/server/sampling.test.mjs
