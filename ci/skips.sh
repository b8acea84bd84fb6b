#!/usr/bin/env bash
# Compares the tests that printed a SKIPPED line in a test log with a committed list, by name.
#   ci/skips.sh EXPECTED LOG
# A SKIPPED line reads `SKIPPED <test binary>::<test>: <what> (<why>)` (tests/common/mod.rs).
# EXPECTED holds one `<test binary>::<test>` per line (`#` comments and blank lines ignored; the
# order does not matter, but keep it sorted): adding a GPU-only test body is adding its line.
# Prints the count and exits 1, printing the difference, when the two sets differ.
set -euo pipefail
expected=$1 log=$2
want=$(sed -e 's/#.*//' -e 's/[[:space:]]*$//' "$expected" | grep -v '^$' | sort -u || true)
got=$(grep -o 'SKIPPED [^ ]*: ' "$log" | sed -e 's/^SKIPPED //' -e 's/: $//' | sort -u || true)
missing=$(comm -23 <(echo "$want") <(echo "$got") | grep -v '^$' || true)
extra=$(comm -13 <(echo "$want") <(echo "$got") | grep -v '^$' || true)
count=$(echo -n "$got" | grep -c '' || true)
if [ -n "$missing$extra" ]; then
    echo "skipped tests differ from $expected ($count skipped, $(echo -n "$want" | grep -c '' || true) expected):"
    [ -z "$extra" ] || echo "$extra" | sed 's/^/  skipped but not expected: /'
    [ -z "$missing" ] || echo "$missing" | sed 's/^/  expected but not skipped: /'
    echo "(a new GPU-only test body: add its name to $expected; a test that should have run: fix it)"
    exit 1
fi
echo "$count skipped tests, exactly those of $expected"
