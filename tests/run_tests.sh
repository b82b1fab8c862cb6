#!/bin/sh
# Runs every test program of the suite (Check suites, fuzz replays, shell integration tests) once per build in
# BUILDS (e.g. "build build/san": as built and under ASan+UBSan) and prints one closing line
# "N passed, N failed": Check's checks are counted one by one, the others one each.
set -u
BUILDS=${BUILDS:-${BUILD:-build}}
export AAH_TESTDATA="tests/data"
passed=0
failed=0
failed_names=""
log=$(mktemp)
first=1
for build in $BUILDS; do
	export AAH_BUILD="$build"
	# An entry may start with environment settings: the engine suites run again with fused projections
	# (AAH_FUSE=1: one product for q, k, v and one for gate, up), the CUDA backend's default, on the CPU; the
	# scheduler and the batching daemons again with device sampling (AAH_DEVICE_SAMPLING=1: tokens from logits_top's
	# candidates, the CUDA backend's default), which must give the same tokens.
	for entry in "$build"/tests/check_* "$build"/tests/fuzz_* tests/test_*.sh \
	             "AAH_FUSE=1 $build/tests/check_golden" "AAH_FUSE=1 $build/tests/check_aah" \
	             "AAH_DEVICE_SAMPLING=1 $build/tests/check_scheduler" \
	             "AAH_DEVICE_SAMPLING=1 $build/tests/check_scheduler_batching" "AAH_DEVICE_SAMPLING=1 tests/test_batching.sh"; do
		t=${entry##* }
		envs=${entry%"$t"}
		[ -e "$t" ] || continue
		case "$t" in *.d|*.o) continue;; esac
		# make install, the units and the manifests do not depend on the build flavour: checked once
		case "$t" in tests/test_systemd_unit.sh|tests/test_k8s.sh) [ "$first" = 1 ] || continue;; esac
		name="$envs$(basename "$t") [$build]"
		echo "== $name"
		case "$t" in
			*.sh) env $envs sh "$t" >"$log" 2>&1; rc=$? ;;
			*) env $envs "$t" >"$log" 2>&1; rc=$? ;;
		esac
		cat "$log"
		summary=$(grep -E '^[0-9]+%: Checks: [0-9]+' "$log" | tail -1)
		if [ -n "$summary" ]; then
			n=$(echo "$summary" | sed -E 's/.*Checks: ([0-9]+).*/\1/')
			f=$(echo "$summary" | sed -E 's/.*Failures: ([0-9]+).*/\1/')
			e=$(echo "$summary" | sed -E 's/.*Errors: ([0-9]+).*/\1/')
			bad=$((f + e))
			passed=$((passed + n - bad))
			failed=$((failed + bad))
			if [ "$bad" -gt 0 ] || [ "$rc" -ne 0 ]; then
				failed_names="$failed_names $name"
				[ "$bad" -eq 0 ] && failed=$((failed + 1))
			fi
		elif [ "$rc" -eq 0 ]; then
			passed=$((passed + 1))
		else
			failed=$((failed + 1))
			failed_names="$failed_names $name"
		fi
	done
	first=0
done
rm -f "$log"
[ -n "$failed_names" ] && echo "FAILED:$failed_names"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
