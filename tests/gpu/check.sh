#!/bin/sh
# tests/gpu/check.sh — the one prepared run on a GPU machine (issue 7): the CUDA test suites (the engine suites with
# decode steps replayed from CUDA graphs and launched op by op, AAH_CUDA_GRAPHS=0), then aah-bench on a random
# Qwen3-4B-shaped model with an AAH regime at ACR ≈ 0.3, at 4096 positions (batch-1 decode both ways). Its steps'
# time limits add up to 8 minutes; logs under $OUT when that is set (at most 3 files: check.log, summary.txt,
# device.txt), else /tmp/aah-gpu-check.
#
# Binaries: the carried bundle .bundle/ (made on the build machine by tools/bundle.sh; the device has the CUDA
# toolkit but not our Debian libraries), else a fresh `make` here. Knobs, for a rehearsal on a CPU machine:
#   AAH_CHECK_BACKEND=cpu  AAH_CHECK_PRESET=tiny  AAH_CHECK_KV_BUDGET=1073741824  sh tests/gpu/check.sh
set -u
T0=$(date +%s)
LOGDIR=${OUT:-/tmp/aah-gpu-check}
mkdir -p "$LOGDIR"
LOG=$LOGDIR/check.log
SUMMARY=$LOGDIR/summary.txt
: >"$LOG"
: >"$SUMMARY"
BACKEND=${AAH_CHECK_BACKEND:-cuda}
PRESET=${AAH_CHECK_PRESET:-qwen3-4b}
KV_BUDGET=${AAH_CHECK_KV_BUDGET:-85899345920}   # 80 GiB: 64 sequences of 4096 f32 positions under full attention
MODEL=${AAH_CHECK_MODEL:-/tmp/aah-bench-$PRESET}
THREADS=$(nproc 2>/dev/null || echo 4)

say() { echo "$*" | tee -a "$LOG"; }
elapsed() { echo $(( $(date +%s) - T0 )); }
# step NAME SECONDS CMD...: runs CMD under a time limit, its output into the log and on stdout
step() {
	name=$1 limit=$2
	shift 2
	say "== $name (at $(elapsed) s, limit $limit s): $*"
	out=$(mktemp)
	timeout "$limit" "$@" >"$out" 2>&1
	rc=$?
	tee -a "$LOG" <"$out"
	rm -f "$out"
	say "   $name: exit $rc$([ $rc -eq 124 ] && echo ' (time limit)')"
	return $rc
}

# ---- binaries and libraries ----
if [ -x .bundle/build/tests/kernels/check_gpu ]; then
	BUILD=.bundle/build
	export LD_LIBRARY_PATH="$PWD/.bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	say "binaries: the carried bundle (.bundle/), $(head -n 2 .bundle/STAMP 2>/dev/null | tr '\n' ' ')"
	# a bundle made from other sources than these tests a different program
	if ! tail -n +3 .bundle/STAMP | md5sum -c --quiet >/dev/null 2>&1; then
		say "WARNING: .bundle/STAMP does not match kernels/cuda/ and engine/engine.c here: rebuild it (tools/bundle.sh)"
	fi
else
	BUILD=build
	say "binaries: building here"
	make -j"$THREADS" all build/tests/kernels/check_gpu build/tests/engine/check_golden build/tests/engine/check_aah >>"$LOG" 2>&1 ||
		{ say "build failed; see $LOG"; exit 1; }
fi
# cuBLAS 13 and the CUDA runtime: the rpath names /usr/local/cuda/lib64; elsewhere, find them
if [ "$BACKEND" = cuda ] && [ ! -e /usr/local/cuda/lib64/libcublas.so.13 ] && ! ldconfig -p 2>/dev/null | grep -q libcublas.so.13; then
	d=$(find /usr /opt -name 'libcublas.so.13' 2>/dev/null | head -n 1)
	[ -n "$d" ] && export LD_LIBRARY_PATH="$(dirname "$d"):$LD_LIBRARY_PATH" && say "cuBLAS from $(dirname "$d")"
fi
if ! "$BUILD/aahd" --help >/dev/null 2>&1; then
	say "aahd does not start; trying our libstdc++ and libgcc_s (.bundle/lib/compat)"
	ldd "$BUILD/aahd" >>"$LOG" 2>&1
	export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$PWD/.bundle/lib/compat"
	"$BUILD/aahd" --help >/dev/null 2>&1 || { say "aahd still does not start; see $LOG"; exit 1; }
fi
{
	date -u +"%Y-%m-%d %H:%M UTC"
	nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,power.limit --format=csv 2>&1
	nvcc --version 2>&1 | tail -n 2
	uname -a
} >"$LOGDIR/device.txt" 2>&1
cat "$LOGDIR/device.txt" >>"$LOG"

# ---- tests ----
TESTS_RC=0
if [ "$BACKEND" = cuda ]; then
	step test-gpu 150 sh tests/gpu/run.sh "$BUILD" || TESTS_RC=1
	grep -E "^gpu: |^attention |^engine on |^engine decode with graphs|golden .*max|^equivalence|FAILED|Checks:" \
		"$LOG" >>"$SUMMARY"
fi

# ---- the benchmark model: Qwen3-4B shape, random BF16 weights, aah.json regimes at ACR ≈ 0.3 ----
if [ ! -s "$MODEL/model.safetensors" ]; then
	step mkmodel 60 "$BUILD/aah-mkmodel" --preset "$PRESET" --aah --aah-acr 0.3 --aah-default shallow_freeze \
		--out "$MODEL" || exit 1
fi

# ---- benchmarks ----
# batch-1 prefill and decode at ~3.7k positions, weight bytes per token, bandwidth against the device copy
step bench-decode 60 "$BUILD/aah-bench" --backend "$BACKEND" --threads "$THREADS" --prompt 3584 --gen 128 "$MODEL"
# the same decode with every step launched op by op: what the CUDA graphs save (about 20 launches per layer)
[ "$BACKEND" = cuda ] && step bench-decode-nographs 40 env AAH_CUDA_GRAPHS=0 "$BUILD/aah-bench" --backend "$BACKEND" \
	--threads "$THREADS" --prompt 3584 --gen 64 "$MODEL"
# batch 1 at 4096: full attention against the AAH regime, decode speed as the context grows
step bench-context 50 "$BUILD/aah-bench" --backend "$BACKEND" --threads "$THREADS" --context --gen 256 "$MODEL"
# aggregate decode at 1, 4, 16, 64 sequences, 512 and 4096 positions, full attention against the AAH regime
step bench-batch 120 "$BUILD/aah-bench" --backend "$BACKEND" --threads "$THREADS" --batch --kv-budget "$KV_BUDGET" \
	--gen 16 --reps 2 "$MODEL" "$MODEL"
# block-quantized weights (quantized as they load, llama.cpp's mixes): the decode gemv that dequantizes in registers
# and the bf16 tiles of prefill, side by side with bf16; last, since quantizing 4B weights at load takes a while
step bench-weights 90 "$BUILD/aah-bench" --backend "$BACKEND" --threads "$THREADS" --weights bf16,q8_0,q4_k_m \
	--prompt 512 --gen 64 --reps 1 --no-bandwidth "$MODEL"

{
	echo "== aah-bench, backend $BACKEND, model $PRESET (random weights), total $(elapsed) s"
	grep -E " / w bf16|bandwidth|prefill  |decode   |CUDA graphs|^== bench-decode|read per decoded|^AAH at|^regime|^full_attention|^shallow_freeze|/ full_attention|^model|^demo |^0.6B|c=16 gives|^at 4096" "$LOG"
} >>"$SUMMARY"
say ""
say "======== summary ($(elapsed) s) ========"
cat "$SUMMARY" | tee -a "$LOG"
exit $TESTS_RC
