#!/bin/sh
# tests/test_request_fields.sh — docs/http.md's table of request fields lists every field of server/request_fields.c,
# with its endpoint and state, and nothing else.
set -u
fail=0
src=server/request_fields.c
doc=docs/http.md
[ -f "$src" ] && [ -f "$doc" ] || { echo "test_request_fields: FAILURE: run from the repository root"; exit 1; }
n=0
want=$(sed -n 's/^[[:space:]]*{ "\([a-z_]*\)", \(C | H\|C\|H\), \(IMPL\|NOOP\|NO\),.*/\1 \2 \3/p' "$src" |
	sed -e 's/ C | H / both /' -e 's/ C / completions /' -e 's/ H / chat /' \
	    -e 's/ IMPL$/ implemented/' -e 's/ NOOP$/ no-op/' -e 's/ NO$/ refused/')
while read -r name ep state; do
	[ -n "$name" ] || continue
	n=$((n + 1))
	grep -q "^| \`$name\` | $ep | $state |" "$doc" ||
		{ echo "test_request_fields: FAILURE: $doc lacks the row '| \`$name\` | $ep | $state |'"; fail=1; }
done <<EOT
$want
EOT
rows=$(grep -c '^| `[a-z_]*` | \(both\|completions\|chat\) | \(implemented\|no-op\|refused\) |' "$doc")
[ "$rows" -eq "$n" ] || { echo "test_request_fields: FAILURE: $doc has $rows field rows, $src $n"; fail=1; }
[ "$n" -ge 40 ] || { echo "test_request_fields: FAILURE: only $n fields read from $src"; fail=1; }
[ "$fail" -eq 0 ] && echo "test_request_fields: $n fields, all passed"
exit "$fail"
