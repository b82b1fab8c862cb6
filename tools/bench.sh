#!/bin/sh
# tools/bench.sh — `make bench`: builds the benchmark models into the cache folder when missing and prints
# every benchmark measured side by side in this run. Usage: bench.sh BUILD CACHE
set -eu
BUILD=${1:-build}
CACHE=${2:-.cache}
THREADS=${THREADS:-2}

Q06="$CACHE/bench-qwen3-0.6b"
if [ ! -s "$Q06/model.safetensors" ]; then
	"$BUILD/aah-mkmodel" --preset qwen3-0.6b --tokenizer "$CACHE/qwen3-tokenizer" --out "$Q06"
fi

echo "== engine: prefill and decode (BF16 weights, $THREADS threads)"
"$BUILD/aah-bench" --threads "$THREADS" --prompt 512 --gen 64 "$CACHE/demo-model" "$Q06"

echo
echo "== tokenizer throughput"
"$BUILD/aah-tokenize" --tokenizer "$CACHE/qwen3-tokenizer" --bench
