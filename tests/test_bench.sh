#!/bin/sh
# tests/test_bench.sh — aah-bench through its command line on a small test model: every mode runs each --kv-dtype
# asked for and says it in every row, --measure adds its row, bad options exit 2 with a message. It checks what the
# tool prints, never how fast anything ran.
set -u
BUILD=${AAH_BUILD:-build}
DATA=${AAH_TESTDATA:-tests/data}
BENCH="$BUILD/aah-bench"
MODEL="$DATA/qwen3-small-a"
fail=0
say_fail() {
	echo "test_bench: FAILURE: $*"
	fail=1
}
[ -x "$BENCH" ] || { echo "test_bench: FAILURE: $BENCH is not built"; exit 1; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT

# the first mode, two KV types: each prefill, decode, read and resident row names its type
if ! timeout 120 "$BENCH" --no-bandwidth --threads 1 --prompt 40 --gen 4 --kv-dtype f32,bf16 --measure "$MODEL" >"$out" 2>&1; then
	say_fail "aah-bench --kv-dtype f32,bf16 failed"; cat "$out"
fi
for t in f32 bf16; do
	for what in "prefill    40 tokens:" "decode      4 tokens:" "read per decoded token" "resident with the sequence open" \
	            "prefill    40 tokens measured"; do
		grep -q "kv $(printf '%-4s' $t) $what" "$out" || say_fail "no '$what' row for kv $t"
	done
done
[ "$(grep -c '^  kv ' "$out")" -eq 10 ] || say_fail "expected 10 rows, each with its kv type"
grep -q "kv f16" "$out" && say_fail "kv f16 ran without being asked for"

# the dot-product peaks (kernels/cpu/cpu_peak.h): one line at the start, every rate in it a positive finite number, and
# each prefill row its achieved rate and its share of the peak of the instruction its products take (the tiny model's
# bf16 weights on the f32 products: vfmadd231ps, or a scalar loop on a CPU without AVX2); --no-peak leaves them out
peak_nums() {   # the numbers after "= " and "peak " on the lines matching $1, one a line
	grep "$1" "$out" | grep -Eo '(= |peak |ymm |zmm |tdpbusd |tdpbf16ps )[0-9][0-9.e+-]*' | awk '{print $2}'
}
peak_check() {   # $1: what the numbers are; the rest: the numbers; each positive and finite
	what=$1
	shift
	[ $# -gt 0 ] || say_fail "$what: no numbers"
	for n in "$@"; do
		awk -v n="$n" 'BEGIN { exit !(n + 0 > 0 && n + 0 < 1e30) }' || say_fail "$what: '$n' is not a positive finite number"
	done
}
grep -q "^dot-product peaks (1 thread at once, register-only loops, best of 5; a multiply-add counts 2): " "$out" ||
	say_fail "no dot-product peaks line"
# shellcheck disable=SC2046
peak_check "the peaks line" $(peak_nums "^dot-product peaks")
if grep -q "vfmadd231ps zmm" "$out"; then
	[ "$(grep -Ec "^  kv (f32 |bf16) prefill    40 tokens: +[0-9.]+ tokens/s = [0-9.e+-]+ TFLOP/s = [0-9.]+% of the vfmadd231ps [yz]mm peak [0-9.e+-]+ TFLOP/s \(1 thread\)$" "$out")" -eq 2 ] ||
		say_fail "the prefill rows do not give their rate and share of the vfmadd231ps peak"
	# shellcheck disable=SC2046
	peak_check "the prefill rows' rates" $(peak_nums "prefill    40 tokens: ")
else
	echo "test_bench: note: no vfmadd231ps zmm on this CPU; the prefill rows' shares are not checked"
fi
grep -q "^prefill's rate below: 2 x the multiply-adds of every layer's projections" "$out" ||
	say_fail "no line saying what the prefill's rate counts"
if ! timeout 120 "$BENCH" --no-bandwidth --no-peak --threads 1 --prompt 20 --gen 2 "$MODEL" >"$out" 2>&1; then
	say_fail "aah-bench --no-peak failed"; cat "$out"
fi
grep -q "dot-product peaks\|% of the" "$out" && say_fail "--no-peak: the peaks ran"

# the default is f32 alone
if ! timeout 120 "$BENCH" --no-bandwidth --threads 1 --prompt 20 --gen 2 "$MODEL" >"$out" 2>&1; then
	say_fail "aah-bench without --kv-dtype failed"; cat "$out"
fi
[ "$(grep -c '^  kv f32 ' "$out")" -eq 4 ] || say_fail "without --kv-dtype: expected 4 rows of kv f32"
grep -q "CPU time" "$out" && say_fail "wall time by default, yet it speaks of CPU time"

# --cpu-time says so
if ! timeout 120 "$BENCH" --cpu-time --no-bandwidth --threads 1 --prompt 20 --gen 2 "$MODEL" >"$out" 2>&1; then
	say_fail "aah-bench --cpu-time failed"; cat "$out"
fi
grep -q "^speeds in this process's CPU time (--cpu-time), 1 thread; load average" "$out" || say_fail "--cpu-time: no note"
[ "$(grep -c '^  kv f32 ' "$out")" -eq 4 ] || say_fail "--cpu-time: expected 4 rows"

# batching on the small model (no aah.json: the first row only), f16
if ! timeout 180 "$BENCH" --batch --threads 1 --gen 3 --reps 1 --kv-budget 16777216 --kv-dtype f16 "$MODEL" \
	>"$out" 2>&1; then
	say_fail "aah-bench --batch failed"; cat "$out"
fi
grep -Eq '^demo +512  full_attention +f16 ' "$out" || say_fail "--batch: no row with kv f16"
grep -q "kv f16  demo at 512" "$out" || say_fail "--batch: no summary for kv f16"

# AAH against full attention at 4096 positions on a tiny model with aah.json, two KV types: four rows, the ratios of
# each type and across types, all naming the model's default regime
aah=$(mktemp -d)
trap 'rm -f "$out"; rm -rf "$aah"' EXIT
"$BUILD/aah-mkmodel" --preset tiny --aah --aah-acr 0.3 --out "$aah" >/dev/null 2>&1 || say_fail "aah-mkmodel failed"
if ! timeout 300 "$BENCH" --context --threads 1 --gen 16 --kv-dtype f32,f16 "$aah" >"$out" 2>&1; then
	say_fail "aah-bench --context failed"; cat "$out"
fi
reg=$(sed -n 's/.*"default_regime": *"\([a-z_]*\)".*/\1/p' "$aah/aah.json")
[ -n "$reg" ] || say_fail "no default regime in the tiny model's aah.json"
for t in f32 f16; do
	grep -Eq "^full_attention +$t " "$out" || say_fail "--context: no full_attention row for kv $t"
	grep -Eq "^$reg +$t " "$out" || say_fail "--context: no $reg row for kv $t"
	grep -q "^kv $(printf '%-4s' $t) $reg / full_attention: " "$out" || say_fail "--context: no ratio line for kv $t"
done
grep -q "^$reg kv f16 / kv f32: prefill" "$out" || say_fail "--context: no f16 / f32 line for $reg"

# speculative decoding on the tiny AAH model: the verify pass and the oracle's lines for each --weights type (no row
# may disagree with plain decoding), then no speculation, prompt lookup and the model under its own other regime end
# to end, with identical outputs; a k past 15 exits 2
if ! timeout 120 "$BENCH" --spec --threads 1 --prompt 48 --gen 24 --spec-k 3 --requests 2 --weights f32,q8_0 \
	--regime full_attention --draft-regime "$reg" "$aah" >"$out" 2>&1; then
	say_fail "aah-bench --spec failed"; cat "$out"
fi
for w in f32 q8_0; do
	grep -Eq "w $w +at [0-9]+ positions: decode step [0-9.]+ ms, verify pass of 4 positions [0-9.]+ ms = [0-9.]+x" \
		"$out" || say_fail "--spec: no verify line for $w"
	grep -Eq "w $w +greedy 24 tokens: plain [0-9.]+ tok/s; oracle draft k=3 [0-9.]+ tok/s = [0-9.]+x \(0 rows" "$out" ||
		say_fail "--spec: no oracle line for $w, or rows disagreed"
done
for k in off ngram "regime ($reg)"; do
	grep -Fq "    $k " "$out" || say_fail "--spec: no end-to-end row for $k"
done
[ "$(grep -c 'outputs identical' "$out")" -eq 2 ] || say_fail "--spec: outputs not identical"
"$BENCH" --spec --spec-k 16 "$aah" >"$out" 2>&1
[ $? -eq 2 ] || say_fail "--spec --spec-k 16 did not exit 2"

# shared prefixes on the tiny AAH model: one beginning and different tails of two lengths, the cache off and on for
# full attention and the default regime, the same tokens, the cache's tokens, the beginning's bytes; then the pool
# filling (16 beginnings, 2 rounds: the second restores from the cache); a bad size or list exits 2
if ! timeout 120 "$BENCH" --shared-prefix --threads 1 --prefix 64 --tail 8,40 --requests 4 --kv-dtype f16 "$aah" \
	>"$out" 2>&1; then
	say_fail "aah-bench --shared-prefix failed"; cat "$out"
fi
for r in full_attention "$reg"; do
	for t in 8 40; do
		sent=$((4 * (64 + t)))
		grep -Eq "^$r +$t +off +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +$sent +0 *$" "$out" ||
			say_fail "--shared-prefix: no $r tail $t off row"
		grep -Eq "^$r +$t +on +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9]+ +[1-9][0-9]* +yes$" "$out" ||
			say_fail "--shared-prefix: no $r tail $t on row with cached tokens and the same tokens"
		grep -Eq "^$r +$t cache on: .* fewer tokens prefilled" "$out" || say_fail "--shared-prefix: no $r tail $t summary"
	done
	grep -Eq "^$r +one cached 64-token beginning holds .* fit in" "$out" || say_fail "--shared-prefix: no $r bytes line"
done
if ! timeout 120 "$BENCH" --shared-prefix --threads 1 --prefix 64 --tail 8 --fill 0.25 --rounds 2 --kv-dtype f16 "$aah" \
	>"$out" 2>&1; then
	say_fail "aah-bench --shared-prefix --fill failed"; cat "$out"
fi
for r in full_attention "$reg"; do
	grep -Eq "^$r +25% +16 +[0-9.]+ +[0-9]+ +[1-9][0-9]* +1008 +[0-9.]+% +[0-9.]+$" "$out" ||
		say_fail "--shared-prefix --fill: no $r row with cached tokens (ideal 16 x 63)"
done
timeout 30 "$BENCH" --shared-prefix --prefix 8 "$aah" >"$out" 2>&1
[ $? -eq 2 ] || say_fail "--shared-prefix --prefix 8 should exit 2"
timeout 30 "$BENCH" --shared-prefix --tail 8,x "$aah" >"$out" 2>&1
[ $? -eq 2 ] || say_fail "--shared-prefix --tail 8,x should exit 2"
timeout 30 "$BENCH" --shared-prefix --fill 0 "$aah" >"$out" 2>&1
[ $? -eq 2 ] || say_fail "--shared-prefix --fill 0 should exit 2"

# the attention op alone: one row per KV type asked for
if ! timeout 120 "$BENCH" --attention --reps 1 --window 512 --kv-dtype bf16,f32 >"$out" 2>&1; then
	say_fail "aah-bench --attention failed"; cat "$out"
fi
grep -q "^CPU attention op (.*window 512" "$out" || say_fail "--attention: no header"
[ "$(grep -Ec '^  kv (bf16|f32 ) prompt chunk of 512 rows at 3072: .* ms .*decode row at 3071: .* ms' "$out")" -eq 2 ] ||
	say_fail "--attention: expected a row for bf16 and f32"
timeout 30 "$BENCH" --attention --window 0 >"$out" 2>&1
[ $? -eq 2 ] || say_fail "--attention --window 0 should exit 2"

# the packed quantized products alone: a row per type and row count (7 × 5), the product each took, no output differing
# between the VNNI kernels and the tiles (the run fails if one does); the tiles' rows only where the CPU has AMX
if ! timeout 300 "$BENCH" --products --reps 1 >"$out" 2>&1; then
	say_fail "aah-bench --products failed"; cat "$out"
fi
grep -q "^packed quantized products 3072 x 1024, one thread" "$out" || say_fail "--products: no header"
[ "$(grep -Ec '^  (q8_0|q4_0|q4_k|q5_k|q6_k) +[0-9]+ rows: vpdpbusd +[0-9.]+ ms .*default \(.*\) +[0-9.]+ ms \( *[0-9.]+ GOP/s\) = [0-9.]+x$' "$out")" -eq 35 ] ||
	say_fail "--products: expected 35 rows"
if grep -q "AMX-INT8 tiles" "$out"; then
	grep -q "^  q4_k  512 rows: .*default (AMX tdpbusd)" "$out" || say_fail "--products: q4_k at 512 rows not on tiles"
	grep -q "^  q6_k  512 rows: .*default (AMX tdpbusd)" "$out" || say_fail "--products: q6_k at 512 rows not on tiles"
fi
timeout 30 "$BENCH" --products --reps 0 >"$out" 2>&1
[ $? -eq 2 ] || say_fail "--products --reps 0 should exit 2"

# the weight-type axis: the files' bf16 weights and q8_0 quantized at load, side by side, each row labelled, the ratio
# line; and in --context, each type's regime speed-up and the line across types
if ! timeout 120 "$BENCH" --no-bandwidth --threads 1 --prompt 20 --gen 2 --weights bf16,q8_0 "$MODEL" >"$out" 2>&1; then
	say_fail "aah-bench --weights bf16,q8_0 failed"; cat "$out"
fi
for w in bf16 q8_0; do
	for what in "prefill    20 tokens:" "decode      2 tokens:" "resident with the sequence open"; do
		grep -q "w $(printf '%-6s' $w) kv f32  $what" "$out" || say_fail "--weights: no '$what' row for w $w"
	done
done
# q8_0's products: AMX tiles or vpdpbusd at the prompt's rows, vpdpbusd for the head's one row, each named with its share
grep -Eq "^  w q8_0   kv f32  prefill    20 tokens: +[0-9.]+ tokens/s = [0-9.e+-]+ TOP/s = [0-9.]+% of (the vpdpbusd [yz]mm peak|its paths' peak) [0-9.e+-]+ TOP/s \(1 thread" "$out" ||
	grep -q "AVX2 packed products" "$out" || say_fail "--weights: the q8_0 prefill row names no vpdpbusd or AMX peak"
grep -q "^  kv f32  w q8_0 / w bf16: prefill .*x, decode .*x, weights read per token 0\.5[0-9]x" "$out" ||
	say_fail "--weights: no q8_0 / bf16 line (q8_0 reads 34/64 of bf16's bytes)"
if ! timeout 300 "$BENCH" --context --threads 1 --gen 16 --weights bf16,q8_0 "$aah" >"$out" 2>&1; then
	say_fail "aah-bench --context --weights failed"; cat "$out"
fi
for w in bf16 q8_0; do
	grep -Eq "^$w +$reg +f32 " "$out" || say_fail "--context --weights: no $reg row for w $w"
	grep -q "^w $(printf '%-6s' $w) kv f32  $reg / full_attention: " "$out" || say_fail "--context: no ratio line for w $w"
done
grep -q "^kv f32  $reg / full_attention decode speed at 4096 by weight type: bf16 .*x q8_0 .*x" "$out" ||
	say_fail "--context --weights: no line across weight types"
for bad in "--weights q3_k" "--weights ," "--weights bf16,q8_0,q4_0,q4_k_m,q5_k_m,q6_k,q4_k"; do
	# shellcheck disable=SC2086
	timeout 30 "$BENCH" $bad "$MODEL" >"$out" 2>&1
	rc=$?
	[ "$rc" -eq 2 ] || say_fail "aah-bench $bad: exit $rc, want 2"
	grep -q -- "--weights" "$out" || say_fail "aah-bench $bad: no message about --weights"
done

# bad input: exit 2 and a message
for bad in "--kv-dtype f8" "--kv-dtype f32,f32" "--kv-dtype ," "--kv-dtype f32,f16,bf16,f32"; do
	# shellcheck disable=SC2086
	timeout 30 "$BENCH" $bad "$MODEL" >"$out" 2>&1
	rc=$?
	[ "$rc" -eq 2 ] || say_fail "aah-bench $bad: exit $rc, want 2"
	grep -q "kv-dtype" "$out" || say_fail "aah-bench $bad: no message about --kv-dtype"
done

for bad in "--threads 2x" "--threads 0" "--prompt x" "--gen -1" "--reps 1e3" "--kv-budget 12Q"; do
	# shellcheck disable=SC2086
	timeout 30 "$BENCH" $bad "$MODEL" >"$out" 2>&1
	rc=$?
	[ "$rc" -eq 2 ] || say_fail "aah-bench $bad: exit $rc, want 2"
	grep -q -- "${bad%% *} takes" "$out" || say_fail "aah-bench $bad: no message naming ${bad%% *}"
done

# tools/stream_latency.py (docs/bench/2026-12-07-streaming-latency.md) through its command line: a small run whose
# streams are matched to the daemon's wake trace, every percentile a real number
lat=$(mktemp)
if timeout 60 /usr/bin/python3 tools/stream_latency.py --aahd "$BUILD/aahd" --model "$DATA/qwen3-small-a" \
	--streams 6 --tokens 8 --rounds 2 --json "$lat" >"$out" 2>&1; then
	/usr/bin/python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))["summary"]
assert s["streams_measured"] >= 1 and s["tokens"] >= 8 * s["streams_measured"], s
assert 0 <= s["socket_ms"]["p50"] <= s["socket_ms"]["p99"] <= s["socket_ms"]["max"], s
' "$lat" >>"$out" 2>&1 || say_fail "stream_latency.py: $(tail -3 "$out")"
else
	say_fail "stream_latency.py failed: $(tail -3 "$out")"
fi
rm -f "$lat"

[ "$fail" -eq 0 ] && echo "test_bench: all passed"
exit "$fail"
