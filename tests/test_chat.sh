#!/bin/sh
# tests/test_chat.sh — POST /v1/chat/completions through real aahd daemons (tests/server/chat.test.mjs): the rendered
# prompt against python3-jinja2's (tests/chat_render.py), the chat shapes, the template's sources, hostile requests and
# templates. Needs node (Node.js 20) and Debian's python3-jinja2 (deploy/deps.sh installs both).
set -eu
BUILD=${AAH_BUILD:-build}
export AAH_BUILD="$BUILD" AAH_TESTDATA="${AAH_TESTDATA:-tests/data}"
fail() { echo "test_chat: FAILURE: $*"; exit 1; }
command -v node >/dev/null 2>&1 || fail "node is not installed (deploy/deps.sh installs npm, which brings it)"
/usr/bin/python3 -c 'import jinja2' 2>/dev/null || fail "python3-jinja2 is not installed (deploy/deps.sh installs it)"
[ -x "$BUILD/aahd" ] || fail "$BUILD/aahd is not built"
exec timeout -k 10 240 node --test --test-reporter=spec tests/server/chat.test.mjs
