#!/bin/bash
# make_indexed writes pairs that inspect_indexed reads; errors are one line
# naming the file, with the documented exit codes.
set -u
make_indexed="$1"
inspect="$2"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*"; exit 1; }

printf 'first line\nsecond line\n\nthird\n' > "$tmp/in.txt"
"$make_indexed" --output="$tmp/lines" --documents=line "$tmp/in.txt" || fail "make_indexed lines"
out=$("$inspect" "$tmp/lines" --text) || fail "inspect lines"
echo "$out"
grep -q "documents  3" <<<"$out" || fail "expected 3 line documents"
grep -q 'doc 0 (11 tokens): "first line\\n"' <<<"$out" || fail "first document text"

"$make_indexed" --output="$tmp/new/dir/val" --corpus=validation --dtype=u16 || fail "make_indexed into a new directory"
test -f "$tmp/new/dir/val.idx" -a -f "$tmp/new/dir/val.bin" || fail "no output in the new directory"
"$make_indexed" --output="$tmp/val" --corpus=validation --dtype=u16 || fail "make_indexed corpus"
out=$("$inspect" "$tmp/val") || fail "inspect corpus"
grep -q "dtype      uint16" <<<"$out" || fail "dtype"

"$inspect" "$tmp/nothing" 2>"$tmp/err"; rc=$?
[ "$rc" = 1 ] || fail "missing dataset: exit $rc, want 1"
grep -q "nothing.idx" "$tmp/err" || fail "error does not name the file: $(cat "$tmp/err")"
[ "$(wc -l < "$tmp/err")" = 1 ] || fail "error is not one line"

printf 'XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX' > "$tmp/bad.idx"; : > "$tmp/bad.bin"
"$inspect" "$tmp/bad" 2>"$tmp/err"; rc=$?
[ "$rc" = 1 ] && grep -q "bad.idx.*bad magic" "$tmp/err" || fail "bad magic: $(cat "$tmp/err")"

"$make_indexed" --output="$tmp/x" 2>/dev/null; rc=$?
[ "$rc" = 2 ] || fail "no inputs: exit $rc, want 2"
echo PASS
