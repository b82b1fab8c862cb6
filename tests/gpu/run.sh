#!/bin/sh
# tests/gpu/run.sh — `make test-gpu`: the CUDA backend's suites, from a build folder (BUILD, default build/):
# op-by-op parity against the CPU backend, then the golden and AAH equivalence suites with the engine on CUDA in
# exact f32 mode, each twice: decode steps replayed from CUDA graphs (the default) and launched op by op
# (AAH_CUDA_GRAPHS=0). Without a CUDA device every suite says "no CUDA device: skipped" and this passes.
# Prints one closing line "gpu: N passed, N failed"; each suite's output goes to $LOGS/<name>.log when LOGS is set.
set -u
BUILD=${1:-${BUILD:-build}}
export AAH_TESTDATA=${AAH_TESTDATA:-tests/data}
# check_gpu's GGUF test runs aah-mkmodel and aah-convert from AAH_BUILD: BUILD's own unless the caller says where
# (`make test-gpu-emulated`, whose build/fakecuda holds only test binaries, names build/)
export AAH_BUILD=${AAH_BUILD:-$BUILD}
passed=0
failed=0
names=""
run() {   # run NAME ENV... -- CMD...
	name=$1
	shift
	log=${LOGS:+$LOGS/$name.log}
	log=${log:-$(mktemp)}
	echo "== $name"
	t0=$(date +%s)
	env "$@" >"$log" 2>&1
	rc=$?
	cat "$log"
	echo "   ($name: exit $rc, $(( $(date +%s) - t0 )) s)"
	if [ "$rc" -eq 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); names="$names $name"; fi
	[ -n "${LOGS:-}" ] || rm -f "$log"
}
run check_gpu "$BUILD/tests/kernels/check_gpu"
# The golden references and the float64 equivalence tests need the exact path: f32 products throughout.
run check_golden_cuda AAH_TEST_BACKEND=cuda AAH_CUDA_MATMUL=f32 "$BUILD/tests/engine/check_golden"
run check_golden_cuda_nographs AAH_TEST_BACKEND=cuda AAH_CUDA_MATMUL=f32 AAH_CUDA_GRAPHS=0 "$BUILD/tests/engine/check_golden"
run check_aah_cuda AAH_TEST_BACKEND=cuda AAH_CUDA_MATMUL=f32 "$BUILD/tests/engine/check_aah"
run check_aah_cuda_nographs AAH_TEST_BACKEND=cuda AAH_CUDA_MATMUL=f32 AAH_CUDA_GRAPHS=0 "$BUILD/tests/engine/check_aah"
# speculative decoding's verify passes and truncations: the stats exactly, the rows to rounding
run check_rollback_cuda AAH_TEST_BACKEND=cuda AAH_CUDA_MATMUL=f32 "$BUILD/tests/engine/check_rollback"
[ -n "$names" ] && echo "FAILED:$names"
echo "gpu: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
