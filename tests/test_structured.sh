#!/bin/sh
# tests/test_structured.sh — constrained decoding through a real socket (tests/server/structured.test.mjs): the schema
# corpus on a random-weights model and on the trained demo run, regexes, choices, llama.cpp's GBNF grammars, judged
# by python3-jsonschema, re and tests/grammar_ref.py; refusals and metrics. Needs node, python3-jsonschema.
set -eu
BUILD=${AAH_BUILD:-build}
export AAH_BUILD="$BUILD" AAH_TESTDATA="${AAH_TESTDATA:-tests/data}"
fail() { echo "test_structured: FAILURE: $*"; exit 1; }
command -v node >/dev/null 2>&1 || fail "node is not installed (deploy/deps.sh installs npm, which brings it)"
/usr/bin/python3 -c 'import jsonschema' 2>/dev/null || fail "python3-jsonschema is not installed (deploy/deps.sh)"
for p in aahd aah-convert; do [ -x "$BUILD/$p" ] || fail "$BUILD/$p is not built"; done
# Under the sanitizers the corpus runs with 4 seeds instead of 20 (n must stay even): every schema and surface still
# goes through the daemon's grammar path, with a fifth of the outputs to judge.
case "$BUILD" in */san) export AAH_STRUCTURED_SEEDS="${AAH_STRUCTURED_SEEDS:-4}" ;; esac
exec timeout -k 10 600 node --test --test-reporter=spec tests/server/structured.test.mjs
