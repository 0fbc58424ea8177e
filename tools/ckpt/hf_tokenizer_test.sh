#!/usr/bin/env bash
# `ckpt export --format hf` adds the run's BPE tokenizer (issue 18): a BPE
# trained by train_bpe on the embedded corpus, the corpus tokenized with it by
# make_indexed, gpt_tiny trained a few steps on that indexed dataset with
# data.tokenizer_vocab/merges; the export then holds vocab.json and
# merges.txt byte-identical to the trained ones, and tokenizer_config.json /
# special_tokens_map.json for AutoTokenizer. A byte-level run exports no
# tokenizer files and says so. (tools/ckpt/hf_check.py --tokenize checks the
# directory with transformers' AutoTokenizer on the GPU machine.)
set -euo pipefail
train_bpe="$1" make_indexed="$2" train="$3" ckpt="$4" tokenizer_json="$5" tokenizer_model="$6"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*"; exit 1; }

"$train_bpe" --corpus=all --vocab_size=512 --out_dir="$tmp/bpe"
"$make_indexed" --output="$tmp/corpus_bpe" --corpus=all --vocab="$tmp/bpe/vocab.json" \
  --merges="$tmp/bpe/merges.txt" --append_eod
base="model.n_layer=2,model.seq_len=32,train.steps=2,train.micro_batch=2,train.global_batch=4,train.eval_every=0"
bpe="model.vocab_size=512,data.source=indexed,data.path=$tmp/corpus_bpe"
bpe="$bpe,data.tokenizer_vocab=$tmp/bpe/vocab.json,data.tokenizer_merges=$tmp/bpe/merges.txt"
"$train" --run_dir "$tmp/run" --set "$base,$bpe" > "$tmp/train.log" || { cat "$tmp/train.log"; fail "train"; }

"$ckpt" export --format hf "$tmp/run/checkpoints" "$tmp/hf" | tee "$tmp/export.log"
grep -q "tokenizer: vocab.json, merges.txt" "$tmp/export.log" || fail "export does not name the tokenizer"
for f in config.json model.safetensors vocab.json merges.txt tokenizer_config.json special_tokens_map.json; do
  test -f "$tmp/hf/$f" || fail "no $f"
done
cmp "$tmp/bpe/vocab.json" "$tmp/hf/vocab.json" || fail "vocab.json is not the trained one"
cmp "$tmp/bpe/merges.txt" "$tmp/hf/merges.txt" || fail "merges.txt is not the trained one"
python3 - "$tmp/hf" <<'PY'
import json, sys
d = sys.argv[1]
vocab = json.load(open(d + "/vocab.json", encoding="utf-8"))
assert len(vocab) == 512 and vocab["<|endoftext|>"] == 511, (len(vocab), vocab.get("<|endoftext|>"))
t = json.load(open(d + "/tokenizer_config.json"))
assert t["tokenizer_class"] == "GPT2Tokenizer" and t["model_max_length"] == 32, t
assert t["eos_token"] == t["bos_token"] == t["unk_token"] == "<|endoftext|>", t
assert t["add_prefix_space"] is False, t
s = json.load(open(d + "/special_tokens_map.json"))
assert s == {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"}, s
c = json.load(open(d + "/config.json"))
assert c["vocab_size"] == 512 and c["bos_token_id"] == c["eos_token_id"] == 511, c
print("ok: tokenizer files parse; config.json has vocab 512, eos 511")
PY

# Flags name the files when the recorded paths are gone (and override them).
mv "$tmp/bpe" "$tmp/bpe_moved"
if "$ckpt" export --format hf "$tmp/run/checkpoints" "$tmp/hf2" 2> "$tmp/err"; then fail "export with missing tokenizer files"; fi
cat "$tmp/err"
grep -q "data.tokenizer_vocab.*--vocab_json" "$tmp/err" || fail "error does not point at the flags"
[ ! -e "$tmp/hf2/model.safetensors" ] || fail "a failed export wrote the model"
"$ckpt" export --format hf --vocab_json "$tmp/bpe_moved/vocab.json" --merges "$tmp/bpe_moved/merges.txt" \
  "$tmp/run/checkpoints" "$tmp/hf2"
cmp "$tmp/bpe_moved/merges.txt" "$tmp/hf2/merges.txt" || fail "--merges not copied"

# A byte-level run: no tokenizer files, and the output says so.
"$train" --run_dir "$tmp/bytes" --set "$base" > /dev/null
"$ckpt" export --format hf "$tmp/bytes/checkpoints" "$tmp/hf_bytes" | tee "$tmp/export.log"
grep -q "no tokenizer files" "$tmp/export.log" || fail "byte-level export does not say it has no tokenizer"
for f in vocab.json merges.txt tokenizer_config.json special_tokens_map.json; do
  [ ! -e "$tmp/hf_bytes/$f" ] || fail "byte-level export wrote $f"
done
grep -q eos_token_id "$tmp/hf_bytes/config.json" && fail "byte-level config.json has eos_token_id"
# A 512-id tokenizer does not fit its 256 ids; one flag alone is a usage error.
if "$ckpt" export --format hf --vocab_json "$tmp/bpe_moved/vocab.json" --merges "$tmp/bpe_moved/merges.txt" \
    "$tmp/bytes/checkpoints" "$tmp/hf_x" 2> "$tmp/err"; then fail "a tokenizer larger than the model"; fi
grep -q "512 token ids but model.vocab_size is 256" "$tmp/err" || fail "$(cat "$tmp/err")"
set +e
"$ckpt" export --format hf --vocab_json "$tmp/bpe_moved/vocab.json" "$tmp/bytes/checkpoints" "$tmp/hf_x" 2>/dev/null
rc=$?
set -e
[ "$rc" = 2 ] || fail "--vocab_json without --merges: exit $rc, want 2"

# tokenizer.json (issue 30): a Llama-3-style file of 271 ids, the corpus tokenized with it.
"$make_indexed" --output="$tmp/corpus_hf" --corpus=all --tokenizer_json="$tokenizer_json" \
  --append_eod --eod_token='<|end_of_text|>' 2> /dev/null
"$train" --run_dir "$tmp/hfrun" --set "$base,model.vocab_size=272,data.source=indexed,data.path=$tmp/corpus_hf,data.tokenizer_json=$tokenizer_json" > /dev/null
"$ckpt" export --format hf "$tmp/hfrun/checkpoints" "$tmp/hf_json" | tee "$tmp/export.log"
grep -q "tokenizer: tokenizer.json, tokenizer_config.json from $tokenizer_json" "$tmp/export.log" || fail "export does not name tokenizer.json"
cmp "$tokenizer_json" "$tmp/hf_json/tokenizer.json" || fail "tokenizer.json is not the recorded one"
for f in vocab.json merges.txt special_tokens_map.json; do
  [ ! -e "$tmp/hf_json/$f" ] || fail "a tokenizer.json export wrote $f"
done
python3 - "$tmp/hf_json" <<'PY'
import json, sys
d = sys.argv[1]
t = json.load(open(d + "/tokenizer_config.json"))
assert t == {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 32,
             "eos_token": "<|end_of_text|>", "clean_up_tokenization_spaces": False}, t
c = json.load(open(d + "/config.json"))
assert c["vocab_size"] == 272 and c["bos_token_id"] == c["eos_token_id"] == 270, c
print("ok: tokenizer.json export; eos <|end_of_text|> = 270")
PY

# tokenizer.model (issue 30): a Llama-2-style SentencePiece BPE of 800 pieces.
"$make_indexed" --output="$tmp/corpus_spm" --corpus=all --tokenizer_model="$tokenizer_model" \
  --append_eod 2> /dev/null
"$train" --run_dir "$tmp/spmrun" --set "$base,model.vocab_size=800,data.source=indexed,data.path=$tmp/corpus_spm,data.tokenizer_model=$tokenizer_model" > /dev/null
"$ckpt" export --format hf "$tmp/spmrun/checkpoints" "$tmp/hf_spm" | tee "$tmp/export.log"
grep -q "tokenizer: tokenizer.model, tokenizer_config.json, special_tokens_map.json from $tokenizer_model" "$tmp/export.log" \
  || fail "export does not name tokenizer.model"
cmp "$tokenizer_model" "$tmp/hf_spm/tokenizer.model" || fail "tokenizer.model is not the recorded one"
for f in vocab.json merges.txt tokenizer.json; do
  [ ! -e "$tmp/hf_spm/$f" ] || fail "a tokenizer.model export wrote $f"
done
python3 - "$tmp/hf_spm" <<'PY'
import json, sys
d = sys.argv[1]
t = json.load(open(d + "/tokenizer_config.json"))
assert t == {"tokenizer_class": "LlamaTokenizer", "model_max_length": 32, "bos_token": "<s>",
             "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": False,
             "add_eos_token": False, "legacy": True, "sp_model_kwargs": {},
             "clean_up_tokenization_spaces": False}, t
s = json.load(open(d + "/special_tokens_map.json"))
assert s == {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}, s
c = json.load(open(d + "/config.json"))
assert c["vocab_size"] == 800 and c["bos_token_id"] == 1 and c["eos_token_id"] == 2, c
print("ok: tokenizer.model export; bos <s> = 1, eos </s> = 2")
PY
# The recorded file gone: the error names the setting.
cp "$tokenizer_model" "$tmp/spm_copy.model"
"$train" --run_dir "$tmp/spmrun2" --set "$base,model.vocab_size=800,data.source=indexed,data.path=$tmp/corpus_spm,data.tokenizer_model=$tmp/spm_copy.model" > /dev/null
rm "$tmp/spm_copy.model"
if "$ckpt" export --format hf "$tmp/spmrun2/checkpoints" "$tmp/hf_spm2" 2> "$tmp/err"; then fail "export with a missing tokenizer.model"; fi
grep -q "the run's tokenizer (data.tokenizer_model): cannot open $tmp/spm_copy.model" "$tmp/err" || fail "$(cat "$tmp/err")"
echo PASS
