#!/bin/sh
# tools/bundle.sh — packs what the GPU check needs for a machine that has the CUDA toolkit and driver but not our
# Debian libraries (the lent device machine): the programs and GPU test binaries of BUILD, and every shared library
# they load that is neither the C runtime's nor CUDA's, into DEST (default .bundle/, which git ignores). There:
#   LD_LIBRARY_PATH=DEST/lib DEST/build/tests/kernels/check_gpu
# The C runtime (glibc, libgcc_s, libstdc++) is the target's own: ours is Debian 12's (glibc 2.36), and binaries
# built against it run on newer ones; copies of libgcc_s and libstdc++ wait in DEST/lib/compat in case the target's
# are older. CUDA's libraries are the target toolkit's (the binaries' rpath names /usr/local/cuda/lib64).
# Usage: tools/bundle.sh [BUILD] [DEST]; then rehearse it here: tools/bundle.sh --check [DEST]
set -eu

base_lib() {   # true for the libraries the target machine brings itself
	case $1 in
	libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libresolv.so*|ld-linux*|libgcc_s.so*|libstdc++.so*) return 0 ;;
	libcudart.so*|libcublas.so*|libcublasLt.so*|libcuda.so*|libnvidia*) return 0 ;;
	esac
	return 1
}

if [ "${1:-}" = "--check" ]; then
	# Every library a bundled binary loads must resolve into DEST/lib or be a base library, with nothing else on the
	# search path; then each binary must start from a clean environment.
	DEST=${2:-.bundle}
	bad=0
	for f in "$DEST"/build/* "$DEST"/build/tests/*; do
		[ -f "$f" ] || continue
		env -i LD_LIBRARY_PATH="$DEST/lib" ldd "$f" | awk '/=>/ {print $1, $3}' | while read -r name path; do
			if ! base_lib "$name" && [ "${path#"$DEST"/lib/}" = "$path" ]; then
				echo "bundle: $f loads $name from $path, not from $DEST/lib"
				echo x >>"$DEST/.bad"
			fi
		done
	done
	[ -e "$DEST/.bad" ] && bad=1 && rm -f "$DEST/.bad"
	for f in "$DEST"/build/aahd "$DEST"/build/aah-bench "$DEST"/build/aah-mkmodel "$DEST"/build/aah-convert; do
		env -i LD_LIBRARY_PATH="$DEST/lib" "$f" --help >/dev/null 2>&1 || { echo "bundle: $f --help fails"; bad=1; }
	done
	[ "$bad" -eq 0 ] && echo "bundle: $DEST is complete ($(du -sh "$DEST" | cut -f1))"
	exit "$bad"
fi

BUILD=${1:-build}
DEST=${2:-.bundle}
rm -rf "$DEST"
mkdir -p "$DEST/build/tests/kernels" "$DEST/build/tests/engine" "$DEST/lib/compat"
for b in aahd aah-bench aah-mkmodel aah-convert aah-tokenize; do
	[ -x "$BUILD/$b" ] && cp "$BUILD/$b" "$DEST/build/"
done
for t in kernels/check_gpu engine/check_golden engine/check_aah; do
	cp "$BUILD/tests/$t" "$DEST/build/tests/$t"
done
for f in "$DEST"/build/* "$DEST"/build/tests/*/*; do
	[ -f "$f" ] && ldd "$f" | awk '/=> \// {print $1, $3}'
done | sort -u | while read -r name path; do
	if base_lib "$name"; then
		case $name in libgcc_s.so*|libstdc++.so*) cp -L "$path" "$DEST/lib/compat/$name" ;; esac
	else
		cp -L "$path" "$DEST/lib/$name"
	fi
done
# debug information stays here; the bundle travels
for f in "$DEST"/build/* "$DEST"/build/tests/* "$DEST"/lib/*.so*; do
	[ -f "$f" ] && strip --strip-debug "$f" 2>/dev/null || true
done
# what the bundle holds, for the log of whoever runs it: a stale bundle would test old code
{
	date -u +"bundled %Y-%m-%d %H:%M UTC"
	git describe --always --dirty 2>/dev/null || echo "no git"
	md5sum kernels/cuda/*.cu kernels/cuda/*.cuh engine/engine.c 2>/dev/null
} >"$DEST/STAMP"
echo "bundle: $DEST ($(du -sh "$DEST" | cut -f1)): $(ls "$DEST/lib" | grep -vc compat) libraries"
