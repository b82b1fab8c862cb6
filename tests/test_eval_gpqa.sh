#!/bin/sh
# tests/test_eval_gpqa.sh — aah-eval's GPQA-Diamond n-shot prompts (k = 1, 3, 5; the first 20 items) against the
# harness's, byte for byte, as tests/eval/harness_reference.py builds them with Python's own random from the whole
# Diamond split in AAH_BENCHMARKS (default ../shared/benchmarks; gpqa_diamond.full.jsonl, never copied into the
# repository). Without that file it says SKIPPED and passes. Needs Debian's python3; no server.
set -eu
BUILD=${AAH_BUILD:-build}
export AAH_BUILD="$BUILD" AAH_BENCHMARKS="${AAH_BENCHMARKS:-../shared/benchmarks}"
if [ ! -x "$BUILD/aah-eval" ]; then
	echo "test_eval_gpqa: FAILURE: $BUILD/aah-eval is not built"
	exit 1
fi
if [ ! -x /usr/bin/python3 ]; then
	echo "test_eval_gpqa: FAILURE: needs /usr/bin/python3 (deploy/deps.sh installs it)"
	exit 1
fi
exec timeout -k 10 600 /usr/bin/python3 tests/eval/test_gpqa_prompts.py
