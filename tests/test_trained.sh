#!/bin/sh
# tests/test_trained.sh — the trained runs end to end (tests/server/trained.test.mjs, Node's test runner): every
# committed checkpoint of runs/base and runs/aah imported by aah-convert and served by a real aahd against the float64
# PyTorch reference (tools/aah_train.py score and eval); the whole run is bounded by a timeout. Needs node and
# python3-torch (deploy/deps.sh installs both).
set -eu
BUILD=${AAH_BUILD:-build}
export AAH_BUILD="$BUILD"
for p in aahd aah-convert aah-tokenize; do
	if [ ! -x "$BUILD/$p" ]; then
		echo "test_trained: FAILURE: $BUILD/$p is not built"
		exit 1
	fi
done
if ! command -v node >/dev/null 2>&1; then
	echo "test_trained: FAILURE: node is not installed (deploy/deps.sh installs npm, which brings it)"
	exit 1
fi
exec timeout -k 10 400 node --test --test-reporter=spec tests/server/trained.test.mjs
