#!/usr/bin/env bash
# tokenize --tokenizer_json against ids from Hugging Face's JS tokenizer
# (@huggingface/tokenizers 0.2.0, an independent implementation of
# tokenizer.json; testdata/hf_json/README.md says how they were made): every
# fixture, every line of testdata/hf_json/text.txt. Then --decode, and the
# exit status of refused files and flags.
set -uo pipefail
bin="$1" dir="$2"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*"; exit 1; }

for json in "$dir"/*.json; do
  name=$(basename "$json" .json)
  "$bin" --tokenizer_json="$json" < "$dir/text.txt" > "$tmp/$name.ids" || fail "$name: tokenize"
  if ! cmp -s "$tmp/$name.ids" "$dir/$name.ids"; then
    diff "$tmp/$name.ids" "$dir/$name.ids" | head -6
    fail "$name: ids differ from the JS reference's"
  fi
  echo "$name: $(wc -l < "$tmp/$name.ids") lines, $(wc -w < "$tmp/$name.ids") ids: identical"
done

# Byte-level files without NFC decode back to the text exactly.
for name in llama3_style gpt2_hf; do
  "$bin" --tokenizer_json="$dir/$name.json" --decode < "$dir/$name.ids" > "$tmp/$name.txt" \
    || fail "$name: --decode"
  cmp -s "$tmp/$name.txt" "$dir/text.txt" || fail "$name: decode(encode(text)) != text"
done

printf '1 2\n999999\n' | "$bin" --tokenizer_json="$dir/llama3_style.json" --decode \
  > /dev/null 2> "$tmp/err"; rc=$?
[ "$rc" = 1 ] && grep -q "line 2: token id 999999 is not in the vocabulary" "$tmp/err" \
  || fail "bad id: exit $rc, $(cat "$tmp/err")"
sed 's/"type": "BPE"/"type": "Unigram"/' "$dir/llama3_style.json" > "$tmp/unigram.json"
"$bin" --tokenizer_json="$tmp/unigram.json" < /dev/null 2> "$tmp/err"; rc=$?
[ "$rc" = 1 ] && grep -q 'unigram.json: model.type: "Unigram" is not supported' "$tmp/err" \
  || fail "Unigram: exit $rc, $(cat "$tmp/err")"
"$bin" --tokenizer_json="$dir/llama3_style.json" --vocab=x --merges=y < /dev/null 2> /dev/null
rc=$?; [ "$rc" = 2 ] || fail "--tokenizer_json with --vocab: exit $rc, want 2"
"$bin" --vocab=x --merges=y --decode < /dev/null 2> /dev/null
rc=$?; [ "$rc" = 2 ] || fail "--decode without --tokenizer_json: exit $rc, want 2"
echo PASS
