#!/bin/sh
# tests/test_k8s.sh — deploy/k8s/ and deploy/container/ without a cluster or a container engine (neither runs on this
# project's machines), with Debian 12's tools:
#  - yamllint: every YAML file of deploy/ is well-formed and tidy;
#  - tests/k8s_validate.py: each object against the API models of python3-kubernetes (field names, types, required
#    fields), then the deployment's promises (probes, drain timing, read-only model, scrape annotations, HPA metric
#    served by the adapter rule, the CUDA variant);
#  - aahd --print-config reads the ConfigMap's aahd.conf (every key known, every value valid);
#  - promtool checks the adapter rule's PromQL, its template filled in as prometheus-adapter fills it;
#  - the Containerfiles: Debian 12 bases only, no download but apt, every COPY source present, and every package they
#    install a Debian 12 package (apt-cache; the CUDA image's non-free ones against a bookworm non-free package list
#    fetched into .cache/apt-nonfree/ once a day).
set -eu
BUILD=${AAH_BUILD:-build}
CACHE=${AAH_CACHE:-.cache}
fail() { echo "test_k8s: FAILURE: $*"; exit 1; }
command -v yamllint >/dev/null 2>&1 || fail "yamllint is missing (Debian package yamllint; deploy/deps.sh)"
/usr/bin/python3 -c 'import kubernetes, yaml' 2>/dev/null || fail "python3-kubernetes or python3-yaml is missing (deploy/deps.sh)"
command -v promtool >/dev/null 2>&1 || fail "promtool is missing (Debian package prometheus)"
[ -x "$BUILD/aahd" ] || fail "$BUILD/aahd is not built"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

yamllint -s -d "{extends: default, rules: {line-length: {max: 120}, document-start: disable}}" \
	deploy/k8s deploy/prometheus tests/prometheus || fail "yamllint"
/usr/bin/python3 tests/k8s_validate.py deploy/k8s/aahd.yaml deploy/k8s/aahd-cuda.yaml deploy/k8s/prometheus-adapter.yaml ||
	fail "k8s_validate"
# ... and the validator does catch a misspelt field
sed 's/periodSeconds: 10/periodSecond: 10/' deploy/k8s/aahd.yaml >"$tmp/bad.yaml"
if /usr/bin/python3 tests/k8s_validate.py "$tmp/bad.yaml" deploy/k8s/aahd-cuda.yaml deploy/k8s/prometheus-adapter.yaml >/dev/null; then
	fail "k8s_validate accepted a misspelt field"
fi

/usr/bin/python3 -c 'import sys, yaml
for d in yaml.safe_load_all(open("deploy/k8s/aahd.yaml")):
    if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "aahd-config":
        sys.stdout.write(d["data"]["aahd.conf"])' >"$tmp/aahd.conf"
"$BUILD/aahd" --config "$tmp/aahd.conf" --print-config >"$tmp/effective.conf" || fail "aahd refuses the ConfigMap's aahd.conf"
grep -q '^shutdown_grace_seconds = 30$' "$tmp/effective.conf" || fail "the ConfigMap's shutdown_grace_seconds is not 30"

/usr/bin/python3 -c 'import yaml
d = yaml.safe_load(open("deploy/k8s/prometheus-adapter.yaml"))
rules = yaml.safe_load(d["data"]["config.yaml"])["rules"]
print("groups:\n  - name: adapter\n    rules:")
for i, r in enumerate(rules):
    q = r["metricsQuery"].replace("<<.Series>>", "aahd_requests_waiting").replace(
        "<<.LabelMatchers>>", "namespace=\"default\",pod=~\"aahd-.*\"").replace("<<.GroupBy>>", "pod")
    assert "<<" not in q, q
    print(f"      - record: adapter:rule{i}\n        expr: {q!r}")' >"$tmp/adapter.rules.yml" || fail "reading the adapter rule"
promtool check rules "$tmp/adapter.rules.yml" >/dev/null || fail "the adapter's metricsQuery is not valid PromQL"

# the Containerfiles
nonfree_lists() {
	d="$CACHE/apt-nonfree"
	if [ -z "$(find "$d/lists" -name '*non-free_binary-amd64_Packages*' -mmin -1440 2>/dev/null)" ]; then
		mkdir -p "$d/parts" "$d/lists/partial" "$d/cache"
		printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: main contrib non-free\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
			>"$d/parts/bookworm.sources"
		apt-get -qq -o Dir::Etc::sourcelist=/dev/null -o Dir::Etc::sourceparts="$PWD/$d/parts" \
			-o Dir::State::Lists="$PWD/$d/lists" -o Dir::Cache="$PWD/$d/cache" update >/dev/null 2>&1 ||
			fail "could not fetch Debian 12's non-free package list (apt-get update into $d)"
	fi
	APT_OPTS="-o Dir::Etc::sourcelist=/dev/null -o Dir::Etc::sourceparts=$PWD/$d/parts -o Dir::State::Lists=$PWD/$d/lists -o Dir::Cache=$PWD/$d/cache"
}
for cf in deploy/container/Containerfile deploy/container/Containerfile.cuda; do
	[ -f "$cf" ] || fail "$cf is missing"
	grep -E '^FROM ' "$cf" | grep -vqE '^FROM docker\.io/library/debian:bookworm(-slim)?( AS [a-z]+)?$' &&
		fail "$cf: a base image other than Debian 12"
	grep -qiE '(curl|wget|git clone|pip install|npm install|ADD +https?:)' "$cf" && fail "$cf: downloads beyond apt"
	for src in $(sed -n 's/^COPY \([^-][^ ]*\) .*/\1/p' "$cf"); do
		[ -e "$src" ] || fail "$cf: COPY $src: no such file in the repository"
	done
	pkgs=$(awk '/apt-get install/ {on=1} on {print} on && !/\\$/ {on=0}' "$cf" | tr ' \\' '\n\n' |
		grep -E '^[a-z0-9][a-z0-9.+-]+$' | grep -vxE 'apt-get|install|rm|DEBIAN_FRONTEND=noninteractive|&&' | sort -u)
	[ -n "$pkgs" ] || fail "$cf: found no package"
	APT_OPTS=""
	grep -q 'non-free' "$cf" && nonfree_lists
	# one look-up for all: "name: candidate" per package (apt-cache policy prints nothing for an unknown name)
	# shellcheck disable=SC2086
	apt-cache $APT_OPTS policy $pkgs 2>/dev/null | awk '/^[^ ].*:$/ {n=substr($0, 1, length($0)-1)} /^  Candidate:/ {print n, $2}' \
		>"$tmp/candidates"
	for p in $pkgs; do
		awk -v p="$p" '$1 == p && $2 !~ /^\(/ {f = 1} END {exit !f}' "$tmp/candidates" ||
			fail "$cf: $p is not a Debian 12 package"
	done
	echo "test_k8s: $cf: Debian 12 base; in Debian 12:" $pkgs
done
echo "test_k8s: yamllint, the Kubernetes API models, aahd.conf, the adapter's PromQL, the Containerfiles: ok"
