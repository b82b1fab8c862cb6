#!/bin/sh
# Runs every test program of the suite (Check suites, fuzz replays, shell integration tests) for each build in BUILDS
# (e.g. "build build/san": as built and under ASan+UBSan), TEST_JOBS at a time (default: the processors online),
# prints one line per suite as it ends and a closing line "N passed, N failed" (Check's checks counted one by one,
# the others one each), then the whole log of every suite that failed. Every log is kept in TEST_LOGS (default
# <first build>/test-logs/).
#
# The first build runs everything. A sanitizer build (a folder named san) runs the suites where the sanitizers find
# things: every Check suite and fuzz replay, and the shell tests that drive our C code in ways no other suite does.
# SAN_SKIP lists the others, each for a reason given there; they all ran in the first pass.
#
# Suites run beside each other, so none may depend on the machine being quiet or on another suite's files: each
# daemon takes a free port (--port 0), temporary files come from mktemp, and what a suite installs into the cache
# (npm packages) is installed under a lock. One script never runs twice at once (its two builds' runs take turns):
# a script's own cache steps (test_jinja's tokenizer fetch) are not all locked.
set -u
BUILDS=${BUILDS:-${BUILD:-build}}
JOBS=${TEST_JOBS:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)}
first_build=${BUILDS%% *}
LOGS=${TEST_LOGS:-$first_build/test-logs}
export AAH_TESTDATA="tests/data"
# Not under the sanitizers (run once, as built):
#   test_train.sh         PyTorch trains the reference model: no C code of ours
#   test_k8s.sh, test_systemd_unit.sh   manifests and units: nothing of ours is compiled for them
#   test_bench.sh         aah-bench's timing runs: the same engine paths as check_golden / check_aah, 20x slower
#   test_fleet.sh         replicas behind nginx and Prometheus: the daemon's requests are test_server's
#   test_dashboard.sh     headless Chromium reading /stats: test_stats covers the endpoint
#   test_openai_node.sh, test_agent.sh, test_agent_sdk.sh   npm clients speaking the endpoints test_server,
#                         test_chat and test_tools drive under the sanitizers
#   test_eval_gpqa.sh, test_trained.sh   full evaluations of the trained model: test_eval.sh runs aah-eval's code
#   AAH_FUSE=1 check_aah  (below) the fused path is check_golden's fused run's too
# and suites with random rounds run a quarter of them (tests/test_env.h test_rounds; test_structured.sh 4 seeds).
SAN_SKIP=${SAN_SKIP-"test_train.sh test_k8s.sh test_systemd_unit.sh test_bench.sh test_fleet.sh test_dashboard.sh \
test_openai_node.sh test_agent.sh test_agent_sdk.sh test_eval_gpqa.sh test_trained.sh"}
# Started first, the longest (measured: a quiet first pass on 2 cores), then the other shell tests, then the rest, so
# that the pool's workers end together.
SLOW_FIRST="test_systemd_unit.sh test_train.sh test_eval.sh check_grammar test_structured.sh check_gguf check_aah \
test_trained.sh check_kernels check_quant_engine test_server.sh check_sampler check_eval_sandbox check_convert"

mkdir -p "$LOGS" || exit 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM

# The entries, one a line: "BUILD|ENV|PROGRAM". An entry may carry environment settings: the engine suites run again
# with fused projections (AAH_FUSE=1: one product for q, k, v and one for gate, up), the CUDA backend's default, on
# the CPU; the scheduler and the batching daemons again with device sampling (AAH_DEVICE_SAMPLING=1: tokens from
# logits_top's candidates, the CUDA backend's default), which must give the same tokens.
list="$work/list"
: >"$list"
for build in $BUILDS; do
	san=0
	case "$build" in san|*/san) san=1;; esac
	for entry in "$build"/tests/check_* "$build"/tests/*/check_* "$build"/tests/fuzz_* tests/test_*.sh \
	             "AAH_FUSE=1 $build/tests/engine/check_golden" "AAH_FUSE=1 $build/tests/engine/check_aah" \
	             "AAH_DEVICE_SAMPLING=1 $build/tests/engine/check_scheduler" \
	             "AAH_DEVICE_SAMPLING=1 $build/tests/engine/check_scheduler_batching" "AAH_DEVICE_SAMPLING=1 tests/test_batching.sh"; do
		t=${entry##* }
		envs=${entry%"$t"}
		[ -e "$t" ] || continue
		case "$t" in *.d|*.o) continue;; esac
		base=$(basename "$t")
		# make install, the units and the manifests do not depend on the build flavour: checked once
		case "$t" in tests/test_systemd_unit.sh|tests/test_k8s.sh) [ "$build" = "$first_build" ] || continue;; esac
		if [ "$san" = 1 ]; then
			case " $SAN_SKIP " in *" $base "*) continue;; esac
			# check_aah again with fused projections: check_golden's fused run covers that path under the
			# sanitizers in a tenth of the time
			[ "$envs$base" = "AAH_FUSE=1 check_aah" ] && continue
		fi
		rank=2
		case "$t" in *.sh) rank=1;; esac
		case " $SLOW_FIRST " in *" $base "*) rank=0;; esac
		echo "$rank|$build|$envs|$t"
	done >>"$list"
done
sort -s -t'|' -k1,1n "$list" | cut -d'|' -f2- | awk '{ print NR "|" $0 }' >"$work/ordered"
total=$(wc -l <"$work/ordered")

# One entry: its log, then one line "RESULT|NAME|SECONDS|PASSED|FAILED" in its result file, and the line a reader sees.
cat >"$work/one.sh" <<'EOF'
#!/bin/sh
set -u
line=$1 work=$RUN_WORK logs=$RUN_LOGS
n=${line%%|*}; rest=${line#*|}
build=${rest%%|*}; rest=${rest#*|}
envs=${rest%%|*}; t=${rest#*|}
base=$(basename "$t")
name="$envs$base [$build]"
log="$logs/$(echo "$name" | tr ' /=[]' '__-__').log"
start=$(date +%s)
# the same script for two builds takes turns (its cache steps are its own)
lock="$work/lock.$base"
case "$t" in *.sh) ;; *) lock=/dev/null;; esac
(
	[ "$lock" = /dev/null ] || flock 9
	export AAH_BUILD="$build"
	case "$t" in
		*.sh) env $envs sh "$t" ;;
		*) env $envs "$t" ;;
	esac
) 9>"$lock" >"$log" 2>&1 </dev/null
rc=$?
secs=$(( $(date +%s) - start ))
summary=$(grep -E '^[0-9]+%: Checks: [0-9]+' "$log" | tail -1)
if [ -n "$summary" ]; then
	c=$(echo "$summary" | sed -E 's/.*Checks: ([0-9]+).*/\1/')
	f=$(echo "$summary" | sed -E 's/.*Failures: ([0-9]+).*/\1/')
	e=$(echo "$summary" | sed -E 's/.*Errors: ([0-9]+).*/\1/')
	bad=$((f + e))
	[ "$bad" -eq 0 ] && [ "$rc" -ne 0 ] && bad=1
	ok=$((c - f - e))
else
	if [ "$rc" -eq 0 ]; then ok=1 bad=0; else ok=0 bad=1; fi
fi
verdict=ok
[ "$bad" -gt 0 ] && verdict=FAILED
echo "$verdict|$name|$secs|$ok|$bad|$log" >"$work/result.$n"
printf '%-4s %-58s %5ss  %s\n' "$([ "$verdict" = ok ] && echo ok || echo FAIL)" "$name" "$secs" \
	"$([ -n "$summary" ] && echo "$ok/$((ok + bad)) checks" || echo "rc $rc")"
EOF

echo "running $total suites, $JOBS at a time (logs in $LOGS)"
t0=$(date +%s)
export RUN_WORK="$work" RUN_LOGS="$LOGS"
tr '\n' '\0' <"$work/ordered" | xargs -0 -n 1 -P "$JOBS" sh "$work/one.sh"

passed=0
failed=0
failed_names=""
failed_logs=""
for i in $(seq 1 "$total"); do
	r="$work/result.$i"
	if [ ! -f "$r" ]; then   # the runner itself was cut short
		failed=$((failed + 1))
		failed_names="$failed_names #$i"
		continue
	fi
	IFS='|' read -r verdict name secs ok bad log <"$r"
	passed=$((passed + ok))
	failed=$((failed + bad))
	if [ "$verdict" != ok ]; then
		failed_names="$failed_names $name"
		failed_logs="$failed_logs $log"
	fi
done
for log in $failed_logs; do
	echo "==== $log"
	cat "$log"
done
echo "$total suites in $(( $(date +%s) - t0 )) s, $JOBS at a time"
[ -n "$failed_names" ] && echo "FAILED:$failed_names"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
