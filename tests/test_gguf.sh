#!/bin/sh
# tests/test_gguf.sh — aahd serving GGUF files through a real socket (tests/server/gguf.test.mjs): quantized by
# aah-convert, the bf16 file against the safetensors model it came from. Needs node (Node.js 20).
set -eu
BUILD=${AAH_BUILD:-build}
export AAH_BUILD="$BUILD" AAH_TESTDATA="${AAH_TESTDATA:-tests/data}"
fail() { echo "test_gguf: FAILURE: $*"; exit 1; }
command -v node >/dev/null 2>&1 || fail "node is not installed (deploy/deps.sh installs npm, which brings it)"
[ -x "$BUILD/aahd" ] && [ -x "$BUILD/aah-convert" ] || fail "$BUILD/aahd or $BUILD/aah-convert is not built"
exec timeout -k 10 300 node --test --test-reporter=spec tests/server/gguf.test.mjs
