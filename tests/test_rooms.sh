#!/bin/sh
# tests/test_rooms.sh — the include arrows between the rooms run one way (docs/architecture.md, "Rooms and arrows"):
# every #include "room/…" of a .c, .h, .cu, .cuh or .cc file under base kernels models engine server tools is checked
# against the table below, and one that crosses a room the wrong way fails, naming the file, the line and the include.
# Run from the repository root; it reads the sources only, so it needs no build.
set -u
# A room is a top-level folder, or one of the sub-folders named here as a room of its own; a file in any other
# sub-folder belongs to its top-level folder. Each line: a room, then the rooms its files may include (its own always).
# Lower rooms never include higher ones: base < kernels < models < engine < server < tools, with tools/convert (all of
# aah-convert: the import/export side, calibration, quantization) for the tools alone, kernels/cpu reached from outside
# kernels only by the tools, kernels/cuda by nobody (the CUDA backend is reached through kernels/backend.h), and
# tools/convert and tools/eval apart.
ALLOWED='
base:
kernels:        base kernels/cpu
kernels/cpu:    base kernels
kernels/cuda:   base kernels
models:         base kernels
engine:         base kernels models
server:         base kernels models engine
tools:          base kernels kernels/cpu models engine server tools/convert tools/eval
tools/convert:  base kernels kernels/cpu models engine server
tools/eval:     base kernels kernels/cpu models engine server
'
ROOMS="base kernels models engine server tools"
fail=0
say_fail() {
	echo "test_rooms: FAILURE: $*"
	fail=1
}
if [ ! -f kernels/backend.h ] || [ ! -d tools ]; then
	echo "test_rooms: FAILURE: run it from the repository root"
	exit 1
fi
for r in $(echo "$ALLOWED" | sed -n 's/^\([a-z/_]*\):.*/\1/p'); do
	[ -d "$r" ] || say_fail "the table names $r, which is not a folder (renamed? update the table and docs/architecture.md)"
done

out=$(mktemp)
trap 'rm -f "$out"' EXIT
# shellcheck disable=SC2086
find $ROOMS -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.cc' \) | sort |
awk -v allowed="$ALLOWED" '
function room(p,   n, a) {
	n = split(p, a, "/")
	if (n >= 3 && ((a[1] "/" a[2]) in is_room))
		return a[1] "/" a[2]
	return a[1]
}
BEGIN {
	n = split(allowed, lines, "\n")
	for (i = 1; i <= n; i++) {
		if (lines[i] !~ /:/)
			continue
		key = lines[i]; sub(/:.*/, "", key)
		rest = lines[i]; sub(/^[^:]*:/, "", rest)
		is_room[key] = 1
		list[key] = ""
		m = split(rest, t, " ")
		for (j = 1; j <= m; j++) {
			ok[key, t[j]] = 1
			list[key] = list[key] " " t[j]
		}
	}
	# the first folder of an include that is ours (tests/ included: no source of the product may reach into it)
	ours["base"] = ours["kernels"] = ours["models"] = ours["engine"] = ours["server"] = ours["tools"] = ours["tests"] = 1
	files = 0; checked = 0; crossing = 0; bad = 0
}
{
	file = $0
	files++
	src = room(file)
	lineno = 0
	while ((getline line < file) > 0) {
		lineno++
		if (line !~ /^[ \t]*#[ \t]*include[ \t]*["<]/)
			continue
		inc = line
		sub(/^[ \t]*#[ \t]*include[ \t]*["<]/, "", inc)
		sub(/[">].*$/, "", inc)
		if (inc !~ /\//)
			continue   # a file of its own folder
		if (inc ~ /^\.\.?\//) {
			printf "test_rooms: FAILURE: %s:%d: #include \"%s\": a relative path; name it from the repository root\n", file, lineno, inc
			bad++
			continue
		}
		top = inc; sub(/\/.*/, "", top)
		if (!(top in ours))
			continue   # a system or third-party header
		checked++
		dst = room(inc)
		if (dst == src)
			continue
		crossing++
		if (!((src, dst) in ok)) {
			printf "test_rooms: FAILURE: %s:%d: #include \"%s\": %s/ may not include %s/ (%s/ may include:%s)\n", file, lineno, inc, src, dst, src, list[src] == "" ? " nothing of ours" : list[src]
			bad++
		}
	}
	close(file)
}
END {
	printf "test_rooms: %d files, %d includes of ours, %d across rooms, %d the wrong way\n", files, checked, crossing, bad
	if (files < 100 || crossing == 0) {
		printf "test_rooms: FAILURE: too little found to check (%d files, %d includes across rooms)\n", files, crossing
		bad++
	}
	exit bad > 0 ? 1 : 0
}' >"$out" 2>&1 || fail=1
cat "$out"

[ "$fail" -eq 0 ] && echo "test_rooms: all passed"
exit "$fail"
