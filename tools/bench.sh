#!/bin/sh
# tools/bench.sh — `make bench`: builds the benchmark models into the cache folder when missing and prints
# every benchmark measured side by side in this run. Usage: bench.sh BUILD CACHE. CACHE/bench-demo (the Makefile
# makes it) is aah-mkmodel's demo preset: random weights, 42 M parameters, the Qwen3 tokenizer.
set -eu
BUILD=${1:-build}
CACHE=${2:-.cache}
THREADS=${THREADS:-2}
# The KV element types measured side by side: f32 (the exact reference) and the daemon's default.
KV=${KV:-f32,f16}

Q06="$CACHE/bench-qwen3-0.6b"
if [ ! -s "$Q06/model.safetensors" ]; then
	"$BUILD/aah-mkmodel" --preset qwen3-0.6b --tokenizer "$CACHE/qwen3-tokenizer" --out "$Q06"
fi

# The Qwen3-0.6B layout cut to 8 layers, with aah.json: shallow_freeze has ACR ≈ 0.3 at 4096 positions.
AAH="$CACHE/bench-aah"
if [ ! -s "$AAH/aah.json" ]; then
	"$BUILD/aah-mkmodel" --preset qwen3-0.6b --layers 8 --tokenizer "$CACHE/qwen3-tokenizer" --aah --aah-acr 0.3 \
		--out "$AAH"
fi

echo "== engine: prefill and decode (BF16 weights, $THREADS threads, KV $KV)"
"$BUILD/aah-bench" --threads "$THREADS" --kv-dtype "$KV" --prompt 512 --gen 64 "$CACHE/bench-demo" "$Q06"

echo
echo "== AAH against full attention at 4096 positions (KV $KV)"
"$BUILD/aah-bench" --context --threads "$THREADS" --kv-dtype "$KV" "$AAH"

# Weight types: the BF16 files against GGUF's q8_0 and q4_k_m (quantized as they load, llama.cpp's mixes), loaded at
# once and decoded 16 tokens at a time in turn; then the AAH regime's decode speed-up at 4096 per type (f16 KV, the
# daemon's default).
WEIGHTS=${WEIGHTS:-bf16,q8_0,q4_k_m}
echo
echo "== weight types $WEIGHTS: prefill 512 and decode 128 on the Qwen3-0.6B shape ($THREADS threads, KV f16)"
"$BUILD/aah-bench" --threads "$THREADS" --kv-dtype f16 --weights "$WEIGHTS" --prompt 512 --gen 128 "$Q06"
# llama-bench's tg128 decodes 128 tokens from an empty context (its pp512 is a separate test): the same here, so the
# ratios compare with llama.cpp's own (its quantize README's, and this machine's 1.7x / 2.3x)
echo
echo "== weight types $WEIGHTS: decode 128 from an empty context, as llama-bench's tg128 ($THREADS threads, KV f16)"
"$BUILD/aah-bench" --threads "$THREADS" --kv-dtype f16 --weights "$WEIGHTS" --prompt 1 --gen 128 --no-bandwidth "$Q06"
echo
echo "== weight types $WEIGHTS: AAH against full attention at 4096 positions (KV f16)"
"$BUILD/aah-bench" --context --threads "$THREADS" --kv-dtype f16 --weights "$WEIGHTS" "$AAH"

echo
echo "== continuous batching: aggregate decode speed against concurrency, under one KV budget"
"$BUILD/aah-bench" --batch --threads "$THREADS" --kv-dtype "$KV" "$CACHE/bench-demo" "$AAH"

# The demo preset with aah.json at ACR 0.3 (shallow_freeze): the shared-prefix workload of the prefix cache.
DEMO_AAH="$CACHE/bench-demo-aah"
if [ ! -s "$DEMO_AAH/aah.json" ]; then
	"$BUILD/aah-mkmodel" --preset demo --tokenizer "$CACHE/qwen3-tokenizer" --aah --aah-acr 0.3 --out "$DEMO_AAH"
fi

echo
echo "== shared prefixes: the prefix cache off and on, full attention and an ACR-0.3 regime"
"$BUILD/aah-bench" --shared-prefix --threads "$THREADS" --kv-dtype f16 "$DEMO_AAH"

echo
echo "== tokenizer throughput"
"$BUILD/aah-tokenize" --tokenizer "$CACHE/qwen3-tokenizer" --bench
