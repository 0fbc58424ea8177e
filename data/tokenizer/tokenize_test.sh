#!/bin/bash
# tokenize prints one line of ids per input line; bad flags exit 2, bad files 1.
set -u
tokenize="$1"; vocab="$2"; merges="$3"
fail() { echo "FAIL: $*"; exit 1; }

# " the" = 258, " world" = 264 (256 + merge rank), '!' = 0, ' ' = 220.
out=$(printf 'Hello world\n the!\n\na  b\n' | "$tokenize" --vocab="$vocab" --merges="$merges") \
  || fail "tokenize"
echo "$out"
want=$'39 68 75 75 78 264\n258 0\n\n64 220 280'
[ "$out" = "$want" ] || fail "got '$out', want '$want'"

"$tokenize" --vocab="$vocab" < /dev/null 2>/dev/null; rc=$?
[ "$rc" = 2 ] || fail "missing --merges: exit $rc, want 2"
"$tokenize" --vocab=/nonexistent --merges="$merges" < /dev/null 2>/dev/null; rc=$?
[ "$rc" = 1 ] || fail "missing file: exit $rc, want 1"
echo PASS
