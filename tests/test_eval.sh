#!/bin/sh
# tests/test_eval.sh — aah-eval through its command line against real aahd daemons (tests/eval/test_eval.py): every
# task in every layout scored as an independent reference (tests/eval/harness_reference.py) scores it from the same
# server, resume after a kill, re-rendering, bad input, errors and 429 from the server, a fleet, the code tasks in
# every sandbox mode that works here. Needs Debian's python3 (and bubblewrap for the strongest sandbox); the whole
# run is bounded by a timeout.
set -eu
BUILD=${AAH_BUILD:-build}
export AAH_BUILD="$BUILD" AAH_TESTDATA="${AAH_TESTDATA:-tests/data}"
for b in aahd aah-eval aah-mkmodel; do
	if [ ! -x "$BUILD/$b" ]; then
		echo "test_eval: FAILURE: $BUILD/$b is not built"
		exit 1
	fi
done
if [ ! -x /usr/bin/python3 ]; then
	echo "test_eval: FAILURE: needs /usr/bin/python3 (deploy/deps.sh installs it)"
	exit 1
fi
command -v bwrap >/dev/null 2>&1 ||
	echo "test_eval: no bwrap here (deploy/deps.sh installs bubblewrap): the code tasks run in a weaker sandbox"
exec timeout -k 10 900 /usr/bin/python3 tests/eval/test_eval.py
