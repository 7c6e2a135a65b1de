#!/bin/sh
# `make install` staged with DESTDIR: every file in place with its mode, the
# unit's ExecStart rewritten to PREFIX, and a second install keeps an edited
# /etc/inferd/inferd.yaml and inferd.env.
# Usage: tests/check-install.sh   (BUILD=build/san for another build)
set -u
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build}
dest=$(mktemp -d) || exit 1
trap 'rm -rf "$dest"' EXIT INT TERM
fail=0
bad() { echo "check-install: FAIL: $*" >&2; fail=1; }
mode() { stat -c %a "$1" 2>/dev/null; }

make --no-print-directory install BUILD="$BUILD" DESTDIR="$dest" PREFIX=/usr >/dev/null ||
    { echo "check-install: FAIL: make install" >&2; exit 1; }
for f in usr/bin/inferd:755 usr/share/man/man1/inferd.1:644 \
         usr/lib/systemd/system/inferd.service:644 usr/lib/sysusers.d/inferd.conf:644 \
         etc/inferd/inferd.yaml:644 etc/inferd/inferd.env:600; do
    p=$dest/${f%:*}
    [ -f "$p" ] || { bad "${f%:*} not installed"; continue; }
    [ "$(mode "$p")" = "${f#*:}" ] || bad "${f%:*} has mode $(mode "$p"), want ${f#*:}"
done
grep -q '^ExecStart=/usr/bin/inferd' "$dest/usr/lib/systemd/system/inferd.service" ||
    bad "ExecStart is not rewritten to PREFIX=/usr"
cmp -s "$dest/usr/bin/inferd" "$BUILD/inferd" || bad "the installed binary is not $BUILD/inferd"

echo "# edited by the admin" >>"$dest/etc/inferd/inferd.yaml"
echo "INFERD_API_KEY=kept" >>"$dest/etc/inferd/inferd.env"
out=$(make --no-print-directory install BUILD="$BUILD" DESTDIR="$dest" PREFIX=/usr 2>&1) ||
    bad "a second make install failed"
grep -q 'edited by the admin' "$dest/etc/inferd/inferd.yaml" || bad "reinstall overwrote inferd.yaml"
grep -q 'INFERD_API_KEY=kept' "$dest/etc/inferd/inferd.env" || bad "reinstall overwrote inferd.env"
echo "$out" | grep -q 'kept the existing' || bad "reinstall does not say it kept the files"
[ "$(mode "$dest/etc/inferd/inferd.env")" = 600 ] || bad "reinstall changed inferd.env's mode"

[ $fail = 0 ] && echo "check-install: ok (staged in DESTDIR, PREFIX=/usr; reinstall keeps /etc)"
exit $fail
