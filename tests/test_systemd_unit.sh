#!/bin/sh
# tests/test_systemd_unit.sh — `make install` into a scratch DESTDIR puts the binary, the unit and the configuration
# in their places, and `systemd-analyze verify` accepts the installed unit; conf/aahd.conf is what
# `aahd --print-config` prints, so it documents every key with its default.
set -eu
BUILD=${AAH_BUILD:-build}
fail() { echo "test_systemd_unit: FAILURE: $*"; exit 1; }
command -v systemd-analyze >/dev/null 2>&1 || fail "systemd-analyze is missing (Debian package systemd; deploy/deps.sh)"
[ -x "$BUILD/aahd" ] || fail "$BUILD/aahd is not built"

"$BUILD/aahd" --print-config | diff -u conf/aahd.conf - || fail "conf/aahd.conf differs from aahd --print-config (regenerate it)"
for key in $("$BUILD/aahd" --print-config | sed -n 's/^\([a-z_]*\) = .*/\1/p'); do
	flag=$(echo "$key" | tr _ -)
	"$BUILD/aahd" --help | grep -q -- "--$flag " || fail "--$flag is not in aahd --help"
done

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
# install only: the build is up to date (make test built it)
make --no-print-directory -s install BUILD="$BUILD" DESTDIR="$root" PREFIX=/usr/local >/dev/null || fail "make install"
for f in usr/local/bin/aahd usr/local/lib/systemd/system/aahd.service usr/local/lib/systemd/system/aahd@.service \
	usr/local/lib/systemd/system/aahd.target etc/aahd/aahd.conf; do
	[ -e "$root/$f" ] || fail "make install did not write $f"
done
grep -q '^ExecStart=/usr/local/bin/aahd --config /etc/aahd/aahd.conf$' "$root/usr/local/lib/systemd/system/aahd.service" ||
	fail "ExecStart does not name the installed paths"
# a second install keeps an edited configuration
echo "# edited" >>"$root/etc/aahd/aahd.conf"
make --no-print-directory -s install BUILD="$BUILD" DESTDIR="$root" PREFIX=/usr/local >/dev/null || fail "make install (again)"
grep -q '^# edited$' "$root/etc/aahd/aahd.conf" || fail "make install overwrote the configuration"
# PREFIX reaches the unit
make --no-print-directory -s install BUILD="$BUILD" DESTDIR="$root/opt" PREFIX=/opt/aahd SYSCONFDIR=/opt/aahd/etc >/dev/null ||
	fail "make install PREFIX=/opt/aahd"
grep -q '^ExecStart=/opt/aahd/bin/aahd --config /opt/aahd/etc/aahd/aahd.conf$' "$root/opt/opt/aahd/lib/systemd/system/aahd.service" ||
	fail "PREFIX/SYSCONFDIR are not in the unit"

# verify resolves the unit's dependencies on this machine's units, and checks that ExecStart's binary exists: run it
# on a copy that points at the installed binary in DESTDIR
mkdir -p "$root/verify"
sed "s|^ExecStart=/usr/local/bin/aahd|ExecStart=$root/usr/local/bin/aahd|" "$root/usr/local/lib/systemd/system/aahd.service" \
	>"$root/verify/aahd.service"
out=$(systemd-analyze verify --man=no "$root/verify/aahd.service" 2>&1) || {
	echo "$out"
	fail "systemd-analyze verify"
}
# verify reports some problems as warnings without failing: any line about our unit is a failure
if echo "$out" | grep -i "aahd.service"; then
	fail "systemd-analyze verify warns about the unit"
fi
# and it does catch a broken unit (so that the check above means something)
sed 's/^ProtectSystem=strict/ProtectSystem=sometimes/' "$root/verify/aahd.service" >"$root/verify/broken.service"
if ! systemd-analyze verify --man=no "$root/verify/broken.service" 2>&1 | grep -q "broken.service"; then
	fail "systemd-analyze verify did not notice a broken unit"
fi
for want in Type=notify ProtectSystem=strict ProtectHome=yes PrivateTmp=yes NoNewPrivileges=yes DynamicUser=yes \
	RestrictAddressFamilies= SystemCallFilter=@system-service Restart=on-failure; do
	grep -q "^$want" deploy/aahd.service || fail "the unit lacks $want"
done

# the template unit: one replica per instance, configuration /etc/aahd/%i.conf, the same hardening as aahd.service
u="$root/usr/local/lib/systemd/system/aahd@.service"
grep -q '^ExecStart=/usr/local/bin/aahd --config /etc/aahd/%i.conf$' "$u" || fail "aahd@.service: ExecStart does not read /etc/aahd/%i.conf"
grep -q '^EnvironmentFile=-/etc/aahd/%i.env$' "$u" || fail "aahd@.service: no per-instance environment file (CUDA_VISIBLE_DEVICES)"
grep -q '^ExecStart=/opt/aahd/bin/aahd --config /opt/aahd/etc/aahd/%i.conf$' "$root/opt/opt/aahd/lib/systemd/system/aahd@.service" ||
	fail "PREFIX/SYSCONFDIR are not in aahd@.service"
# every setting of aahd.service from the user on (who runs it, what it may touch) is in the template as it is there
sed -n '/^# A user made for the service/,/^\[Install\]/p' deploy/aahd.service | grep -v '^#' | grep . >"$root/hardening"
[ "$(wc -l <"$root/hardening")" -gt 20 ] || fail "could not read aahd.service's hardening"
while IFS= read -r line; do
	grep -qxF "$line" deploy/aahd@.service || fail "aahd@.service lacks '$line' of aahd.service"
done <"$root/hardening"
for want in Type=notify Restart=on-failure KillMode=mixed TimeoutStopSec=90; do
	grep -q "^$want" deploy/aahd@.service || fail "aahd@.service lacks $want"
done
# verify an instance of it (a template itself is not checked by verify), beside the target it is part of
sed "s|^ExecStart=/usr/local/bin/aahd|ExecStart=$root/usr/local/bin/aahd|" "$u" >"$root/verify/aahd@gpu0.service"
cp "$root/usr/local/lib/systemd/system/aahd.target" "$root/verify/aahd.target"
out=$(systemd-analyze verify --man=no "$root/verify/aahd@gpu0.service" "$root/verify/aahd.target" 2>&1) || {
	echo "$out"
	fail "systemd-analyze verify aahd@gpu0.service"
}
if echo "$out" | grep -i -e "aahd@gpu0.service" -e "aahd.target"; then
	fail "systemd-analyze verify warns about aahd@gpu0.service or aahd.target"
fi
sed 's/^ProtectSystem=strict/ProtectSystem=sometimes/' "$root/verify/aahd@gpu0.service" >"$root/verify/broken@gpu0.service"
if ! systemd-analyze verify --man=no "$root/verify/broken@gpu0.service" 2>&1 | grep -q "broken@gpu0.service"; then
	fail "systemd-analyze verify did not notice a broken instance"
fi
echo "test_systemd_unit: make install and systemd-analyze verify (aahd.service, aahd@gpu0.service, aahd.target): ok"
