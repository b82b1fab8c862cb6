#!/bin/sh
# tests/test_jinja.sh — server/jinja/jinja.h against python3-jinja2 rendering as transformers' apply_chat_template renders
# (tests/jinja/render_ref.py), byte for byte, through aah-jinja's command line: the language piece by piece
# (tests/jinja/language.cases), 600 random templates (tests/jinja/random_cases.py), then the chat templates of Qwen3, Llama 3 (fetched from npm into the cache), ChatML
# and Mistral with every conversation of tests/data/chat/conversations/; then aah-jinja's exit statuses and messages.
set -eu
BUILD=${AAH_BUILD:-build}
CACHE=${AAH_CACHE:-.cache}
DATA=${AAH_TESTDATA:-tests/data}
fail() { echo "test_jinja: FAILURE: $*"; exit 1; }
[ -x "$BUILD/aah-jinja" ] || fail "$BUILD/aah-jinja is not built"
/usr/bin/python3 -c 'import jinja2' 2>/dev/null || fail "needs /usr/bin/python3 with jinja2 (deploy/deps.sh installs python3-jinja2)"
sh tools/fetch_tokenizer.sh "$CACHE" >/dev/null || fail "cannot fetch the Qwen3 tokenizer"
sh tools/fetch_llama3_tokenizer.sh "$CACHE" >/dev/null || fail "cannot fetch the Llama 3 tokenizer config"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
J="$BUILD/aah-jinja"
REF="/usr/bin/python3 tests/jinja/render_ref.py"

# the language, case by case
"$J" --cases tests/jinja/language.cases tests/jinja/language_vars.json >"$tmp/lang.jsonl" || fail "aah-jinja --cases failed"
$REF --cases tests/jinja/language.cases tests/jinja/language_vars.json --compare "$tmp/lang.jsonl" || fail "language cases differ"

# 600 random templates over every operator, filter, test and method (seeded: the same each run)
/usr/bin/python3 tests/jinja/random_cases.py 1 600 >"$tmp/random.cases"
"$J" --cases "$tmp/random.cases" tests/jinja/language_vars.json >"$tmp/random.jsonl" || fail "aah-jinja --cases failed on the random cases"
/usr/bin/python3 -W ignore tests/jinja/render_ref.py --cases "$tmp/random.cases" tests/jinja/language_vars.json \
	--compare "$tmp/random.jsonl" --lenient || fail "random cases differ"

# four real chat templates with every conversation
$REF --make-batch "$tmp/batch.json" "$DATA/chat" "$CACHE" || fail "cannot list the chat renders"
"$J" --batch "$tmp/batch.json" >"$tmp/chat.jsonl" || fail "aah-jinja --batch failed"
$REF --batch "$tmp/batch.json" --compare "$tmp/chat.jsonl" || fail "chat renders differ"

# one render through the plain command line, bytes compared: CRLF line ends, a final newline dropped, UTF-8
printf '{%% for m in messages %%}\r\n  {%%- if m.role == "user" %%}\r\n[{{ m.content }}]\r\n  {%%- endif %%}\r\n{%% endfor %%}\r\n' >"$tmp/crlf.jinja"
printf '{"messages": [{"role": "user", "content": "h\\u00e9"}, {"role": "assistant", "content": "x"}, {"role": "user", "content": "\\u65e5"}]}' >"$tmp/vars.json"
"$J" "$tmp/crlf.jinja" "$tmp/vars.json" >"$tmp/c.out" || fail "aah-jinja failed on a CRLF template"
$REF "$tmp/crlf.jinja" "$tmp/vars.json" >"$tmp/p.out" || fail "render_ref.py failed on a CRLF template"
cmp -s "$tmp/c.out" "$tmp/p.out" || fail "a CRLF template renders differently: $(od -c "$tmp/c.out" | head -3) vs $(od -c "$tmp/p.out" | head -3)"
[ -s "$tmp/c.out" ] || fail "the CRLF template rendered nothing"

# exit statuses: 2 a syntax error (with its line and column), 3 raise_exception, 4 a limit, 1 bad input
expect_rc() {   # WANT WHAT GREP -- aah-jinja arguments…
	want=$1 what=$2 pattern=$3
	shift 4
	set +e
	"$J" "$@" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	set -e
	[ "$rc" = "$want" ] || fail "$what: exit status $rc, not $want ($(cat "$tmp/err"))"
	grep -q "$pattern" "$tmp/err" || fail "$what: stderr lacks '$pattern': $(cat "$tmp/err")"
}
printf 'line one\n{{ 1 + }}\n' >"$tmp/syntax.jinja"
expect_rc 2 "a syntax error" "line 2, column 8: unexpected '}}', expected an expression" -- "$tmp/syntax.jinja" "$tmp/vars.json"
printf '{%% for m in messages %%}\n{%% if m.role == "assistant" %%}{{ raise_exception("no assistants: " ~ m.content) }}{%% endif %%}{%% endfor %%}' >"$tmp/raise.jinja"
expect_rc 3 "raise_exception" "raise_exception: no assistants: x" -- "$tmp/raise.jinja" "$tmp/vars.json"
printf '{%% for i in range(100000) %%}{%% for j in range(100000) %%}{%% endfor %%}{%% endfor %%}' >"$tmp/loop.jinja"
expect_rc 4 "a step limit" "step limit" -- --max-steps 100000 "$tmp/loop.jinja" "$tmp/vars.json"
printf '{%% for i in range(100000) %%}{{ "0123456789" * 100 }}{%% endfor %%}' >"$tmp/big.jinja"
expect_rc 4 "an output limit" "output passed its limit" -- --max-output 1000000 "$tmp/big.jinja" "$tmp/vars.json"
expect_rc 1 "a missing file" "cannot read" -- "$tmp/none.jinja" "$tmp/vars.json"
printf '[1, 2]' >"$tmp/array.json"
expect_rc 1 "variables not an object" "not a JSON object" -- "$tmp/crlf.jinja" "$tmp/array.json"
expect_rc 1 "no arguments" "usage" --
echo "test_jinja: ok"
