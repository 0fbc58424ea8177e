#!/usr/bin/env bash
# gtp's tokenizer against Hugging Face `tokenizers` 0.23.2 (an independent
# implementation): a 2000-token byte-level BPE trained by
# tools/reference/hf_tokenizer_fixture.py on the GPU machine (testdata/hf/),
# and the ids HF gave for every line of testdata/hf_text.txt (multilingual
# text, contractions, whitespace runs, emoji, code). Every line must match.
set -euo pipefail
bin="$1" dir="$2"
got=$("$bin" --vocab "$dir/hf/vocab.json" --merges "$dir/hf/merges.txt" < "$dir/hf_text.txt")
want=$(head -n "$(wc -l < "$dir/hf_text.txt")" "$dir/hf/ids.txt")
if [ "$got" != "$want" ]; then
  diff <(echo "$got") <(echo "$want") | head -20
  echo "tokenizer differs from HF tokenizers"; exit 1
fi
echo "$(echo "$got" | wc -l) lines, $(echo "$got" | wc -w) ids: identical to HF tokenizers"
