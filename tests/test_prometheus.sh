#!/bin/sh
# tests/test_prometheus.sh — deploy/prometheus/: promtool checks the scrape configuration and the rules, runs the
# rules' unit tests (tests/prometheus/aahd.rules.test.yml), then a live Debian Prometheus scrapes two aahd replicas of
# different regimes and must give the fleet ACR of their responses (tests/server/prometheus.test.mjs). Needs promtool
# and prometheus (Debian package prometheus) and node.
set -eu
BUILD=${AAH_BUILD:-build}
export AAH_BUILD="$BUILD" AAH_TESTDATA="${AAH_TESTDATA:-tests/data}"
fail() { echo "test_prometheus: FAILURE: $*"; exit 1; }
command -v promtool >/dev/null 2>&1 || fail "promtool is missing (Debian package prometheus; deploy/deps.sh)"
command -v node >/dev/null 2>&1 || fail "node is not installed (deploy/deps.sh installs npm, which brings it)"
[ -x "$BUILD/aahd" ] && [ -x "$BUILD/aah-mkmodel" ] || fail "$BUILD/aahd or $BUILD/aah-mkmodel is not built"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# the shipped configuration names the rules where Debian keeps them: check it with the repository's copies
sed "s|/etc/prometheus/|$PWD/deploy/prometheus/|" deploy/prometheus/prometheus.yml >"$tmp/prometheus.yml"
promtool check config "$tmp/prometheus.yml" || fail "promtool check config deploy/prometheus/prometheus.yml"
# Debian's Prometheus is built without Kubernetes discovery (promtool refuses kubernetes_sd_configs): check the rest of
# the in-cluster configuration, its relabelling above all, with static targets in its place
grep -q '^    kubernetes_sd_configs:$' deploy/k8s/prometheus-scrape.yml || fail "deploy/k8s/prometheus-scrape.yml: no kubernetes_sd_configs"
sed -e 's|^    kubernetes_sd_configs:$|    static_configs:|' -e 's|^      - role: pod$|      - targets: ["127.0.0.1:8081"]|' \
	-e "s|^  - aahd\.|  - $PWD/deploy/prometheus/aahd.|" deploy/k8s/prometheus-scrape.yml >"$tmp/k8s-scrape.yml"
promtool check config "$tmp/k8s-scrape.yml" || fail "promtool check config deploy/k8s/prometheus-scrape.yml (static targets)"
promtool check rules deploy/prometheus/aahd.rules.yml deploy/prometheus/aahd.alerts.yml || fail "promtool check rules"
promtool test rules tests/prometheus/aahd.rules.test.yml || fail "promtool test rules"
# and the unit tests can fail: the fleet's ACR as an average of the replicas' ratios is caught
sed 's|sum(rate(aahd_branch_usage_total\[5m\]) \* on (job, instance, window) group_left aahd_branch_window)|avg(regime:aahd_acr:rate5m) * sum(rate(aahd_branch_usage_total[5m]) * on (job, instance) group_left aahd_acr_context_length)|' \
	deploy/prometheus/aahd.rules.yml >"$tmp/aahd.rules.yml"
cmp -s "$tmp/aahd.rules.yml" deploy/prometheus/aahd.rules.yml && fail "the mutation of the rules did not apply"
mkdir -p "$tmp/t/tests/prometheus" "$tmp/t/deploy/prometheus"
cp "$tmp/aahd.rules.yml" deploy/prometheus/aahd.alerts.yml "$tmp/t/deploy/prometheus/"
cp tests/prometheus/aahd.rules.test.yml "$tmp/t/tests/prometheus/"
if promtool test rules "$tmp/t/tests/prometheus/aahd.rules.test.yml" >/dev/null 2>&1; then
	fail "promtool test rules passed with the fleet ACR averaged over regimes"
fi
echo "test_prometheus: promtool check config, check rules, test rules: ok"
exec timeout -k 10 300 node --test --test-reporter=spec tests/server/prometheus.test.mjs
