#!/bin/sh
# tools/eval_demo.sh — `make eval-demo`: serves the model `make run` serves (MODEL, default CACHE/demo-run) with aahd
# on a free port, runs aah-eval over the benchmark subsets in DATA (default ../shared/benchmarks) in every regime the
# model has, prints tables 9 and 10 (and writes all outputs under OUT), then stops the server.
# With it, the perplexity of a held-out text (PPL_TEXT, default runs/text/test.txt, the trained runs' test split;
# PPL_TEXT= for none): DATA's task files and that text are linked into OUT/data, which aah-eval reads.
# Usage: eval_demo.sh BUILD CACHE DATA. Settings: LIMIT (items per task, default 20), MAX_GEN (generation cap,
# default 32), MAX_LENGTH (default server: the served model's context; the harness's own default, 2048, is longer
# than the demo model's), CONCURRENCY (default: the server's batch), OUT (default BUILD/eval-demo), THREADS (aahd,
# default all cores), AAHD_ARGS (more aahd flags, e.g. "--prefix-cache off"), FEWSHOT (aah-eval's --num-fewshot, e.g.
# gpqa_diamond=5: GPQA's examples from DATA/gpqa_diamond.full.jsonl, the whole split, when it is there), EVAL_ARGS
# (more aah-eval flags), SERVER=URL to evaluate a server that is already running instead.
set -eu
BUILD=${1:-build}
CACHE=${2:-.cache}
DATA=${3:-../shared/benchmarks}
MODEL=${MODEL:-$CACHE/demo-run}
LIMIT=${LIMIT:-20}
MAX_GEN=${MAX_GEN:-32}
MAX_LENGTH=${MAX_LENGTH:-server}   # the small demo model's context, not the harness's 2048 it could not take
OUT=${OUT:-$BUILD/eval-demo}
if [ ! -d "$DATA" ]; then
	echo "eval-demo: no benchmark data in $DATA (make eval-demo DATA=DIR)" >&2
	exit 1
fi
PPL_TEXT=${PPL_TEXT-runs/text/test.txt}
mkdir -p "$OUT/data"
rm -f "$OUT"/data/*
for f in "$DATA"/*.jsonl; do
	[ -e "$f" ] && ln -s "$(cd "$(dirname "$f")" && pwd)/$(basename "$f")" "$OUT/data/"
done
if [ -n "$PPL_TEXT" ] && [ -f "$PPL_TEXT" ]; then
	ln -s "$(cd "$(dirname "$PPL_TEXT")" && pwd)/$(basename "$PPL_TEXT")" "$OUT/data/perplexity.txt"
fi
PID=""
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null; return 0; }
trap cleanup EXIT INT TERM
if [ -z "${SERVER:-}" ]; then
	LOG="$OUT/aahd.log"
	# shellcheck disable=SC2086
	"$BUILD/aahd" --model "$MODEL" --host 127.0.0.1 --port 0 ${THREADS:+--threads "$THREADS"} ${AAHD_ARGS:-} 2>"$LOG" &
	PID=$!
	PORT=""
	i=0
	while [ -z "$PORT" ] && [ $i -lt 600 ]; do
		kill -0 "$PID" 2>/dev/null || { echo "eval-demo: aahd exited:" >&2; cat "$LOG" >&2; exit 1; }
		PORT=$(sed -n 's/.*listening on http:\/\/[^ ]*:\([0-9][0-9]*\).*/\1/p' "$LOG" | head -1)
		[ -n "$PORT" ] || sleep 0.1
		i=$((i + 1))
	done
	[ -n "$PORT" ] || { echo "eval-demo: aahd did not start within 60 s:" >&2; cat "$LOG" >&2; exit 1; }
	SERVER="http://127.0.0.1:$PORT"
fi
echo "eval-demo: $MODEL on $SERVER; $DATA${PPL_TEXT:+ and $PPL_TEXT}, $LIMIT items per task, generations up to" \
	"$MAX_GEN tokens; outputs in $OUT" >&2
"$BUILD/aah-eval" --server "$SERVER" --data "$OUT/data" --tasks all --regimes all --limit "$LIMIT" --max-gen-toks "$MAX_GEN" \
	--max-length "$MAX_LENGTH" ${FEWSHOT:+--num-fewshot "$FEWSHOT"} \
	${CONCURRENCY:+--concurrency "$CONCURRENCY"} ${EVAL_ARGS:-} --out "$OUT"
# What the prefix cache saved (docs/prefix_cache.md): prompt tokens prefilled against sent, from /metrics
if command -v curl >/dev/null 2>&1 &&
	curl -sf "$SERVER/metrics" | grep -E '^aahd_(prompt_tokens_total|prefix_cache_)' >"$OUT/prefix_cache.txt"; then
	awk '/^aahd_prompt_tokens_total/ { p = $2 } /^aahd_prefix_cache_hit_tokens_total/ { h = $2 }
		END { if (p + h > 0) printf "eval-demo: %d prompt tokens sent, %d prefilled, %d from the prefix cache (%.2fx fewer)\n",
			p + h, p, h, (p + h) / (p > 0 ? p : 1) }' "$OUT/prefix_cache.txt" >&2
fi
