#!/bin/bash
# make_indexed writes pairs that inspect_indexed reads; errors are one line
# naming the file, with the documented exit codes.
set -u
make_indexed="$1"
inspect="$2"
vocab="$3"
merges="$4"
tokenizer_json="$5"
tokenizer_model="$6"
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

# GPT-2 BPE with the miniature vocabulary of data/tokenizer/testdata:
# "Hello world\n" = H e l l o, " world" (264), "\n" (198), then <|endoftext|> (281).
printf 'Hello world\n the!\n' > "$tmp/bpe.txt"
"$make_indexed" --output="$tmp/bpe" --vocab="$vocab" --merges="$merges" --documents=line \
  --append_eod "$tmp/bpe.txt" || fail "make_indexed bpe"
out=$("$inspect" "$tmp/bpe") || fail "inspect bpe"
echo "$out"
grep -q "dtype      uint16" <<<"$out" || fail "bpe dtype"
grep -q 'doc 0 (8 tokens): \[39 68 75 75 78 264 198 281\]' <<<"$out" || fail "bpe doc 0"
grep -q 'doc 1 (4 tokens): \[258 0 198 281\]' <<<"$out" || fail "bpe doc 1"

printf '{"id": 1, "text": "a  b"}\n\n{"text": "caf\\u00e9", "x": [1, {"y": null}]}\n' > "$tmp/in.jsonl"
"$make_indexed" --output="$tmp/jsonl" --vocab="$vocab" --merges="$merges" --json_key=text \
  "$tmp/in.jsonl" || fail "make_indexed jsonl"
out=$("$inspect" "$tmp/jsonl") || fail "inspect jsonl"
echo "$out"
grep -q "documents  2" <<<"$out" || fail "jsonl documents"
grep -q 'doc 0 (3 tokens): \[64 220 280\]' <<<"$out" || fail "jsonl doc 0"
grep -q 'doc 1 (1 tokens): \[271\]' <<<"$out" || fail "jsonl doc 1"

# A tokenizer.json (data/tokenizer/testdata/hf_json/llama3_style.json: Llama-3's
# pre-tokenizer): "hello" 266, " world" 267, "\n" 198, <|end_of_text|> 270.
"$make_indexed" --output="$tmp/hf" --tokenizer_json="$tokenizer_json" --documents=line \
  --append_eod --eod_token='<|end_of_text|>' "$tmp/hfin.txt" 2>/dev/null && fail "no input file"
printf 'hello world\nhello\n' > "$tmp/hfin.txt"
"$make_indexed" --output="$tmp/hf" --tokenizer_json="$tokenizer_json" --documents=line \
  --append_eod --eod_token='<|end_of_text|>' "$tmp/hfin.txt" || fail "make_indexed tokenizer_json"
out=$("$inspect" "$tmp/hf") || fail "inspect tokenizer_json"
echo "$out"
grep -q 'doc 0 (4 tokens): \[266 267 198 270\]' <<<"$out" || fail "tokenizer_json doc 0"
grep -q 'doc 1 (3 tokens): \[266 198 270\]' <<<"$out" || fail "tokenizer_json doc 1"
# --prepend_bos: its <|begin_of_text|> (269, found among the usual names) first.
"$make_indexed" --output="$tmp/hfbos" --tokenizer_json="$tokenizer_json" --documents=line \
  --prepend_bos --append_eod --eod_token='<|end_of_text|>' "$tmp/hfin.txt" 2>/dev/null || fail "make_indexed --prepend_bos"
out=$("$inspect" "$tmp/hfbos") || fail "inspect hfbos"
grep -q 'doc 0 (5 tokens): \[269 266 267 198 270\]' <<<"$out" || fail "tokenizer_json bos doc 0: $out"
"$make_indexed" --output="$tmp/hfbos2" --tokenizer_json="$tokenizer_json" --prepend_bos \
  --bos_token='<s>' "$tmp/hfin.txt" 2>"$tmp/err"; rc=$?
[ "$rc" = 1 ] && grep -q "<s> is not one of its special added tokens; name the beginning-of-document token with --bos_token" "$tmp/err" \
  || fail "bad bos token: exit $rc, $(cat "$tmp/err")"
# --documents does not apply to JSONL (each object is a document): refused, not ignored.
"$make_indexed" --output="$tmp/jsonldocs" --vocab="$vocab" --merges="$merges" --json_key=text \
  --documents=line "$tmp/in.jsonl" 2>"$tmp/err"; rc=$?
[ "$rc" = 2 ] && grep -q "drop --documents" "$tmp/err" || fail "--documents with --json_key: exit $rc, $(cat "$tmp/err")"
# A token named for a step that is off: refused, not ignored.
"$make_indexed" --output="$tmp/eodonly" --tokenizer_json="$tokenizer_json" --eod_token='<|end_of_text|>' \
  "$tmp/hfin.txt" 2>"$tmp/err"; rc=$?
[ "$rc" = 2 ] && grep -q "add --append_eod" "$tmp/err" || fail "--eod_token alone: exit $rc, $(cat "$tmp/err")"
"$make_indexed" --output="$tmp/bosonly" --tokenizer_json="$tokenizer_json" --bos_token='<|begin_of_text|>' \
  "$tmp/hfin.txt" 2>"$tmp/err"; rc=$?
[ "$rc" = 2 ] && grep -q "add --prepend_bos" "$tmp/err" || fail "--bos_token alone: exit $rc, $(cat "$tmp/err")"
# GPT-2 has no beginning-of-sequence token: refused unless named.
"$make_indexed" --output="$tmp/bpebos" --vocab="$vocab" --merges="$merges" --prepend_bos \
  "$tmp/bpe.txt" 2>"$tmp/err"; rc=$?
[ "$rc" = 1 ] && grep -q "GPT-2's vocabulary has no beginning-of-sequence token; name one with --bos_token" "$tmp/err" \
  || fail "gpt2 bos: exit $rc, $(cat "$tmp/err")"
"$make_indexed" --output="$tmp/bytesbos" --prepend_bos "$tmp/bpe.txt" 2>/dev/null; rc=$?
[ "$rc" = 2 ] || fail "bytes with --prepend_bos: exit $rc, want 2"
# Its end-of-document token is not <|endoftext|>: refused, naming --eod_token.
"$make_indexed" --output="$tmp/hf2" --tokenizer_json="$tokenizer_json" --append_eod \
  "$tmp/hfin.txt" 2>"$tmp/err"; rc=$?
[ "$rc" = 1 ] && grep -q "<|endoftext|> is not one of its special added tokens; name the end-of-document token with --eod_token" "$tmp/err" \
  || fail "missing eod: exit $rc, $(cat "$tmp/err")"
"$make_indexed" --output="$tmp/hf3" --tokenizer_json="$tokenizer_json" --vocab="$vocab" \
  --merges="$merges" "$tmp/hfin.txt" 2>"$tmp/err"; rc=$?
[ "$rc" = 2 ] && grep -q "instead of --vocab/--merges" "$tmp/err" || fail "both tokenizers: exit $rc"
[ ! -e "$tmp/hf2.bin" ] && [ ! -e "$tmp/hf3.bin" ] || fail "a refused run wrote output"

# A SentencePiece tokenizer.model (data/tokenizer/testdata/spm/bpe.model, a Llama-2-style
# BPE): the ids the sentencepiece library gives for these texts (testdata/spm/expected.json),
# then </s> (2), the model's end-of-sentence piece, by default.
printf 'ends with newline\n' > "$tmp/spm1.txt"
printf 'line one\nline two\n\nafter an empty line' > "$tmp/spm2.txt"
"$make_indexed" --output="$tmp/spm" --tokenizer_model="$tokenizer_model" --documents=file \
  --append_eod "$tmp/spm1.txt" "$tmp/spm2.txt" 2>"$tmp/err" || fail "make_indexed tokenizer_model: $(cat "$tmp/err")"
grep -q "SentencePiece BPE, 800 pieces" "$tmp/err" || fail "no summary: $(cat "$tmp/err")"
out=$("$inspect" "$tmp/spm") || fail "inspect tokenizer_model"
echo "$out"
grep -q 'doc 0 (13 tokens): \[549 264 299 272 497 328 550 572 558 263 550 13 2\]' <<<"$out" || fail "tokenizer_model doc 0"
grep -q 'doc 1 (27 tokens): \[282 263 550 549 499 13 558 263 550 419 13 13 553 564 551 265 261 554 357 568 566 551 575 282 263 550 2\]' <<<"$out" \
  || fail "tokenizer_model doc 1"
# --prepend_bos: <s> (1), the model's beginning-of-sentence piece, first.
"$make_indexed" --output="$tmp/spmbos" --tokenizer_model="$tokenizer_model" --documents=file \
  --prepend_bos --append_eod "$tmp/spm1.txt" 2>/dev/null || fail "make_indexed spm --prepend_bos"
grep -q 'doc 0 (14 tokens): \[1 549 264 299 272 497 328 550 572 558 263 550 13 2\]' <<<"$("$inspect" "$tmp/spmbos")" \
  || fail "tokenizer_model bos doc 0"
"$make_indexed" --output="$tmp/spm2" --tokenizer_model="$tokenizer_model" --append_eod \
  --eod_token='<|endoftext|>' "$tmp/spm1.txt" 2>"$tmp/err"; rc=$?
[ "$rc" = 1 ] && grep -q "<|endoftext|> is not one of its control, unknown or user-defined pieces; name the end-of-document piece with --eod_token (Llama-2, Mistral: </s>)" "$tmp/err" \
  || fail "bad eod piece: exit $rc, $(cat "$tmp/err")"
"$make_indexed" --output="$tmp/spm3" --tokenizer_model="$tokenizer_model" \
  --tokenizer_json="$tokenizer_json" "$tmp/spm1.txt" 2>"$tmp/err"; rc=$?
[ "$rc" = 2 ] && grep -q "give one tokenizer" "$tmp/err" || fail "two tokenizers: exit $rc, $(cat "$tmp/err")"
"$make_indexed" --output="$tmp/spm4" --tokenizer_model="$tokenizer_json" "$tmp/spm1.txt" 2>"$tmp/err"; rc=$?
[ "$rc" = 1 ] && grep -q "llama3_style.json: this is JSON, not a SentencePiece model" "$tmp/err" \
  || fail "a tokenizer.json as --tokenizer_model: exit $rc, $(cat "$tmp/err")"
[ ! -e "$tmp/spm2.bin" ] && [ ! -e "$tmp/spm3.bin" ] && [ ! -e "$tmp/spm4.bin" ] || fail "a refused run wrote output"

printf '{"title": "x"}\n' > "$tmp/nokey.jsonl"
"$make_indexed" --output="$tmp/y" --vocab="$vocab" --merges="$merges" --json_key=text \
  "$tmp/nokey.jsonl" 2>"$tmp/err"; rc=$?
[ "$rc" = 1 ] && grep -q "nokey.jsonl line 1" "$tmp/err" || fail "missing key: $(cat "$tmp/err")"
"$make_indexed" --output="$tmp/y" --vocab="$vocab" "$tmp/bpe.txt" 2>/dev/null; rc=$?
[ "$rc" = 2 ] || fail "--vocab without --merges: exit $rc, want 2"
# A directory as input used to read as empty and write an empty dataset.
mkdir -p "$tmp/adir"
"$make_indexed" --output="$tmp/z" "$tmp/adir" 2>"$tmp/err"; rc=$?
[ "$rc" = 1 ] && grep -q "adir is a directory: name the files in it" "$tmp/err" || fail "directory input: $(cat "$tmp/err")"
[ ! -e "$tmp/z.bin" ] || fail "a refused input wrote $tmp/z.bin"
# --output is a prefix: a directory (DIR/) used to write the hidden DIR/.bin and DIR/.idx.
mkdir -p "$tmp/outdir"
for o in "$tmp/outdir/" "$tmp/outdir/." "$tmp/outdir/.."; do
  "$make_indexed" --output="$o" "$tmp/bpe.txt" 2>"$tmp/err"; rc=$?
  [ "$rc" = 2 ] && grep -q "names a directory, but --output is a prefix" "$tmp/err" || fail "--output=$o: exit $rc, $(cat "$tmp/err")"
done
[ -z "$(ls -A "$tmp/outdir")" ] || fail "a refused --output wrote $(ls -A "$tmp/outdir")"
echo PASS
