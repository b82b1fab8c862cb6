#!/bin/sh
# Runs every test program of the suite (Check suites, fuzz replays, shell integration tests) and prints
# one closing line "N passed, N failed": Check's checks are counted one by one, the others one each.
set -u
BUILD=${BUILD:-build}
export AAH_BUILD="$BUILD" AAH_TESTDATA="tests/data"
passed=0
failed=0
failed_names=""
log=$(mktemp)
for t in "$BUILD"/tests/check_* "$BUILD"/tests/fuzz_* tests/test_*.sh; do
	[ -e "$t" ] || continue
	case "$t" in *.d|*.o) continue;; esac
	name=$(basename "$t")
	echo "== $name"
	case "$t" in
		*.sh) sh "$t" >"$log" 2>&1; rc=$? ;;
		*) "$t" >"$log" 2>&1; rc=$? ;;
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
rm -f "$log"
[ -n "$failed_names" ] && echo "FAILED:$failed_names"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
