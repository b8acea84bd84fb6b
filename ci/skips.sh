#!/usr/bin/env bash
# Compares the SKIPPED lines of a test log with a committed list, by name and by count.
#   ci/skips.sh EXPECTED LOG
# A SKIPPED line reads `SKIPPED <test binary>::<test>: <what> (<why>)` (tests/common/mod.rs), or
# `SKIPPED <program>: <what> (<why>)` for the programs of ci/gpu-run.sh and tests/xla_flow/run.sh;
# a test that skips several of its checks prints one line for each.
# EXPECTED holds one name per line, once for every SKIPPED line that name is expected to print
# (`#` comments and blank lines ignored; the order does not matter, but keep it sorted): adding a
# GPU-only test body, or one more skipped check in a test that already skips one, is adding a line.
# Prints the count and exits 1, printing each name whose count differs, when the two differ.
set -euo pipefail
export LC_ALL=C
expected=$1 log=$2
# `<count> <name>` for every name, sorted by name.
want=$(sed -e 's/#.*//' -e 's/[[:space:]]*$//' "$expected" | { grep -v '^$' || true; } | sort | uniq -c |
    awk '{print $2, $1}')
got=$({ grep -o 'SKIPPED [^ ]*: ' "$log" || true; } | sed -e 's/^SKIPPED //' -e 's/: $//' | sort | uniq -c |
    awk '{print $2, $1}')
total() { awk '{s += $2} END {print s + 0}' <<<"$1"; }
# Every name of either side with both counts (0 where absent), only where they differ.
differ=$(join -a 1 -a 2 -e 0 -o 0,1.2,2.2 <(echo "$want") <(echo "$got") | awk 'NF == 3 && $2 != $3')
if [ -n "$differ" ]; then
    echo "skipped checks differ from $expected ($(total "$got") SKIPPED lines, $(total "$want") expected):"
    while read -r name want_n got_n; do
        if [ "$want_n" = 0 ]; then
            echo "  skipped but not expected: $name ($got_n time(s))"
        elif [ "$got_n" = 0 ]; then
            echo "  expected but not skipped: $name (expected $want_n time(s))"
        else
            echo "  skipped $got_n time(s), expected $want_n: $name"
        fi
    done <<<"$differ"
    echo "(a new GPU-only test body or skipped check: add a line for it to $expected; a test that should have run: fix it)"
    exit 1
fi
echo "$(total "$got") SKIPPED lines from $(echo -n "$got" | grep -c '' || true) tests, exactly those of $expected"
