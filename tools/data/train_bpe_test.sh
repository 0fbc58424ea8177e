#!/bin/bash
# train_bpe against train_bpe_reference.py, the same algorithm written as a
# naive recount of every pair at every merge: identical vocab.json and
# merges.txt on the embedded corpus's first 6 KB (443 merges, many decided by
# the tie rule) and on 2 KB trained until no pair is left. Then JSONL input,
# `tokenize` on the trained files, a 1 MB run's throughput, flags and errors.
set -u
train_bpe="$1"; print_corpus="$2"; reference="$3"; tokenize="$4"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*"; exit 1; }

for case in "6000 700" "2000 100000"; do
  set -- $case
  bytes="$1" vocab="$2"
  "$print_corpus" --max_bytes="$bytes" > "$tmp/text_$bytes.txt" || fail "print_corpus"
  mkdir -p "$tmp/ref_$bytes"
  "$train_bpe" --input="$tmp/text_$bytes.txt" --vocab_size="$vocab" --out_dir="$tmp/ours_$bytes" \
    > "$tmp/out_$bytes" || fail "train_bpe on $bytes bytes"
  cat "$tmp/out_$bytes"
  python3 "$reference" "$tmp/text_$bytes.txt" "$vocab" "$tmp/ref_$bytes" || fail "reference"
  cmp "$tmp/ours_$bytes/merges.txt" "$tmp/ref_$bytes/merges.txt" \
    || { diff "$tmp/ours_$bytes/merges.txt" "$tmp/ref_$bytes/merges.txt" | head; fail "merges differ ($bytes bytes)"; }
  cmp "$tmp/ours_$bytes/vocab.json" "$tmp/ref_$bytes/vocab.json" || fail "vocab.json differs ($bytes bytes)"
  echo "$bytes bytes: $(($(wc -l < "$tmp/ours_$bytes/merges.txt") - 1)) merges, identical to the reference"
done
grep -q "(no pair left)" "$tmp/out_2000" || fail "2 KB to exhaustion does not say so"
head -1 "$tmp/ours_6000/merges.txt" | grep -qx "#version: 0.2" || fail "merges.txt header"

# The trained files load in `tokenize`; the text gets ~3x shorter.
ids=$("$tokenize" --vocab="$tmp/ours_6000/vocab.json" --merges="$tmp/ours_6000/merges.txt" \
  < "$tmp/text_6000.txt" | wc -w) || fail "tokenize"
echo "6000 bytes -> $ids tokens"
[ "$ids" -lt 2500 ] || fail "encoding with 443 merges is not shorter: $ids tokens"

# JSONL: the documents only (keys and other fields are not text).
printf '{"id": 1, "text": "the cat the cat"}\n\n{"text": "the hat", "meta": {"k": "zzzz zzzz"}}\n' > "$tmp/in.jsonl"
"$train_bpe" --input="$tmp/in.jsonl" --json_key=text --vocab_size=1000 --out_dir="$tmp/jsonl" \
  || fail "train_bpe jsonl"
grep -q "z" "$tmp/jsonl/merges.txt" && fail "merged text outside --json_key"
grep -qx "Ġ the" "$tmp/jsonl/merges.txt" || fail "jsonl merges: $(cat "$tmp/jsonl/merges.txt")"

# The whole embedded corpus (1 MB), with the progress and speed lines.
"$train_bpe" --corpus=all --vocab_size=2048 --out_dir="$tmp/corpus" || fail "train_bpe --corpus"
grep -q '"<|endoftext|>":2047}$' "$tmp/corpus/vocab.json" || fail "<|endoftext|> is not the last id"

# Errors: bad flags exit 2, bad input 1 with one line naming the file.
"$train_bpe" --input="$tmp/in.jsonl" --out_dir="$tmp/x" 2>/dev/null; rc=$?
[ "$rc" = 2 ] || fail "no --vocab_size: exit $rc, want 2"
"$train_bpe" --corpus=all --input="$tmp/in.jsonl" --vocab_size=300 --out_dir="$tmp/x" 2>/dev/null; rc=$?
[ "$rc" = 2 ] || fail "--corpus with --input: exit $rc, want 2"
# A stray argument is named (it used to get the flags' summary, which it satisfied).
"$train_bpe" --input="$tmp/in.jsonl" --vocab_size=300 --out_dir="$tmp/x" extra 2>"$tmp/err"; rc=$?
[ "$rc" = 2 ] && grep -q "unexpected argument 'extra'" "$tmp/err" || fail "stray argument: exit $rc, $(cat "$tmp/err")"
[ ! -e "$tmp/x" ] || fail "a refused command wrote $tmp/x"
"$train_bpe" --input="$tmp/nope.txt" --vocab_size=300 --out_dir="$tmp/x" 2>"$tmp/err"; rc=$?
[ "$rc" = 1 ] && grep -q "nope.txt" "$tmp/err" || fail "missing file: exit $rc, $(cat "$tmp/err")"
printf '{"title": "x"}\n' > "$tmp/nokey.jsonl"
"$train_bpe" --input="$tmp/nokey.jsonl" --json_key=text --vocab_size=300 --out_dir="$tmp/x" 2>"$tmp/err"; rc=$?
[ "$rc" = 1 ] && grep -q "nokey.jsonl line 1" "$tmp/err" || fail "missing key: exit $rc, $(cat "$tmp/err")"
[ "$(wc -l < "$tmp/err")" = 1 ] || fail "error is not one line"
echo PASS
