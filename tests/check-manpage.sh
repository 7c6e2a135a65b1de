#!/bin/sh
# Keeps config/inferd.1 in sync with the binary:
#  - every option `inferd --help` prints has an entry (a .TP heading) under
#    "Server options", every option `inferd generate --help` prints one under
#    "Generate options", and no entry there names an option the binary lacks
#    (--help, -h and --version excepted: main() handles them);
#  - the .TH line names the version `inferd --version` prints;
#  - groff renders it with no warning (-ww) and `man -l` without complaint,
#    where groff and man are installed (skipped with a message otherwise).
# Usage: tests/check-manpage.sh   (BUILD=build/san for another build,
# MANPAGE=FILE for another page)
set -u
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build}
BIN=$BUILD/inferd
PAGE=${MANPAGE:-config/inferd.1}
fail=0
bad() { echo "check-manpage: FAIL: $*" >&2; fail=1; }

[ -x "$BIN" ] || { echo "check-manpage: FAIL: $BIN not built (make $BIN)" >&2; exit 1; }
[ -f "$PAGE" ] || { echo "check-manpage: FAIL: $PAGE missing" >&2; exit 1; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM

# Options as the binary prints them: lines "  --name ...".
help_opts() { "$BIN" "$@" --help 2>/dev/null | sed -n 's/^  \(--[a-z][a-z0-9-]*\).*/\1/p' | sort -u; }
help_opts >"$tmp/serve.help"
help_opts generate >"$tmp/gen.help"
[ -s "$tmp/serve.help" ] || bad "'$BIN --help' lists no option"
[ -s "$tmp/gen.help" ] || bad "'$BIN generate --help' lists no option"

# Option headings of the page: the line after each .TP, per .SS subsection,
# with troff escapes (\- \fB \(aq) undone.
headings() {
    awk -v want="$1" '
        /^\.SH/ { sec = ""; next }
        /^\.SS/ { sec = $0; sub(/^\.SS[ \t]+/, "", sec); gsub(/"/, "", sec); next }
        /^\.TP/ { tp = 1; next }
        tp { tp = 0; if (sec == want) print }
    ' "$PAGE" | sed -e 's/\\-/-/g' -e 's/\\f[BIRP]//g' |
        grep -oE -- '(^|[ "])--?[a-z][a-z0-9-]*' | sed 's/^[ "]*//' | sort -u
}
headings "Server options" >"$tmp/serve.man"
headings "Generate options" >"$tmp/gen.man"

check_pair() { # help-file man-file what command
    n=0
    for o in $(cat "$1"); do
        n=$((n + 1))
        grep -qx -- "$o" "$2" || bad "$4 prints $o but $PAGE has no entry for it under \"$3\""
    done
    for o in $(cat "$2"); do
        case $o in --help|-h|--version) continue ;; esac
        grep -qx -- "$o" "$1" || bad "$PAGE documents $o under \"$3\" but $4 does not print it"
    done
    echo "check-manpage: $n options of '$4' documented under \"$3\""
}
check_pair "$tmp/serve.help" "$tmp/serve.man" "Server options" "inferd --help"
check_pair "$tmp/gen.help" "$tmp/gen.man" "Generate options" "inferd generate --help"

ver=$("$BIN" --version 2>/dev/null | sed -n 's/^inferd \([^ ]*\).*/\1/p')
if grep -q "^\.TH INFERD 1 .*\"inferd $ver\"" "$PAGE"; then
    echo "check-manpage: .TH names inferd $ver, as --version"
else
    bad "$PAGE's .TH line does not name \"inferd $ver\" (what '$BIN --version' prints)"
fi

if command -v groff >/dev/null 2>&1; then
    if LC_ALL=C.UTF-8 groff -man -Tutf8 -ww -z "$PAGE" >"$tmp/groff.out" 2>&1 &&
        [ ! -s "$tmp/groff.out" ]; then
        echo "check-manpage: groff -man -ww: no warnings"
    else
        bad "groff -man -Tutf8 -ww -z $PAGE:"; sed 's/^/    /' "$tmp/groff.out" >&2
    fi
else
    echo "check-manpage: skipped: groff not installed (groff rendering check)"
fi
if command -v man >/dev/null 2>&1; then
    if MANWIDTH=80 man -l "$PAGE" >"$tmp/man.out" 2>"$tmp/man.err" && [ ! -s "$tmp/man.err" ] &&
        grep -q "^NAME" "$tmp/man.out"; then
        echo "check-manpage: man -l renders $(wc -l <"$tmp/man.out") lines"
    else
        bad "man -l $PAGE:"; sed 's/^/    /' "$tmp/man.err" >&2
    fi
else
    echo "check-manpage: skipped: man not installed (man -l check)"
fi

if [ "$fail" -ne 0 ]; then
    echo "check-manpage: FAILED" >&2
    exit 1
fi
echo "check-manpage: ok"
