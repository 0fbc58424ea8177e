#!/usr/bin/env bash
# tools/generate end to end (issue 18): train gpt_tiny a few steps under its
# TP2·GTP2 layout (4 ranks), then sample from the checkpoint on one rank:
# the requested number of tokens (byte tokens: one byte each) and the
# tokens/s line; the same seed reproduces the text, another seed changes
# it; the root and the iter_ directory give the same; greedy is
# deterministic; --device cuda runs where a GPU is visible (the same output
# format) and is refused cleanly where none is. The trainer's own samples
# (train.sample_every, from its live sharded weights) equal generate's on the
# checkpoint of the same step with the same seed (train.seed 1234).
#
# Then a run on an indexed dataset made with make_indexed --tokenizer_json
# (data.tokenizer_json recorded): generate encodes the prompt and decodes
# with that tokenizer.json and stops at its <|end_of_text|>; a recorded file
# that is gone is named, and --tokenizer_json gives it.
set -euo pipefail
train="$1" gen="$2" make_indexed="$3" tokenizer_json="$4" tokenizer_model="$5"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
"$train" --run_dir "$tmp/run" --set "model.n_layer=2,train.steps=6,train.micro_batch=2,train.global_batch=4,train.eval_every=0,train.log_every=3,checkpoint.every=3,checkpoint.keep_last=3,train.sample_every=3,train.sample_prompt=The cat ,train.sample_tokens=24" > "$tmp/train.log"
grep -aq "world=4 tp=2 tp_num_weight_shards=4" "$tmp/run/checkpoints/iter_0000006/metadata.pb"
ck="$tmp/run/checkpoints"
run() { "$gen" --checkpoint "$1" --prompt "The cat " --max_tokens 24 "${@:2}"; }
run "$ck" --seed 7 --top_k 20 > "$tmp/a.txt"
run "$ck" --seed 7 --top_k 20 > "$tmp/b.txt"
run "$ck/iter_0000006" --seed 7 --top_k 20 > "$tmp/c.txt"
run "$ck" --seed 8 --top_k 20 > "$tmp/d.txt"
run "$ck" --temperature 0 > "$tmp/g1.txt"
run "$ck" --temperature 0 --seed 3 > "$tmp/g2.txt"
run "$ck/iter_0000003" --seed 1234 > "$tmp/s3.txt"
run "$ck" --seed 1234 > "$tmp/s6.txt"
python3 - "$tmp" <<'PY'
import re, sys
t = sys.argv[1]
def parts(name):
    data = open(f"{t}/{name}", "rb").read()
    i = data.rindex(b"\ngenerated ")
    body, last = data[:i], data[i + 1:].decode()
    m = re.fullmatch(r"generated (\d+) tokens in ([0-9.]+) s \(([0-9.]+) tokens/s\)\n", last)
    assert m, last
    assert int(m.group(1)) == 24, last
    assert float(m.group(3)) > 0, last
    assert body.startswith(b"The cat "), body
    assert len(body) == len(b"The cat ") + 24, (len(body), body)  # one byte per token
    return body
a, b, c, d = (parts(x) for x in ("a.txt", "b.txt", "c.txt", "d.txt"))
assert a == b, (a, b)
assert a == c, (a, c)
assert a != d, (a, d)
assert parts("g1.txt") == parts("g2.txt")
log = open(f"{t}/train.log", "rb").read()
for step, name in ((3, "s3.txt"), (6, "s6.txt")):
    tag = b"step %5d  sample: " % step
    i = log.index(tag) + len(tag)
    sample = log[i:i + len(b"The cat ") + 24]
    assert log[i + len(sample):i + len(sample) + 1] == b"\n", log[i:i + 80]
    assert sample == parts(name), (step, sample, parts(name))
assert parts("s3.txt") != parts("s6.txt")
print("ok:", a, d)
PY
if run "$ck" --seed 7 --top_k 20 --device cuda > "$tmp/cuda.txt" 2> "$tmp/err.txt"; then
  python3 - "$tmp/cuda.txt" <<'PY'
import re, sys
data = open(sys.argv[1], "rb").read()
i = data.rindex(b"\ngenerated ")
assert re.fullmatch(rb"generated 24 tokens in [0-9.]+ s \([0-9.]+ tokens/s\)\n", data[i + 1:]), data
assert data[:i].startswith(b"The cat ") and len(data[:i]) == len(b"The cat ") + 24, data
PY
else
  grep -q "no CUDA device is visible" "$tmp/err.txt" || { cat "$tmp/err.txt"; exit 1; }
fi
if "$gen" --checkpoint "$ck" --device tpu > /dev/null 2> "$tmp/err.txt"; then
  echo "--device tpu was accepted"; exit 1
fi
grep -q "not supported" "$tmp/err.txt"
# --stop: greedy decoding up to the first occurrence of a character it produces.
python3 - "$tmp/g1.txt" > "$tmp/stopchar" <<'PY'
import sys
body = open(sys.argv[1], "rb").read().split(b"\ngenerated ")[0][len(b"The cat "):]
c = next(ch for ch in body[2:].decode("latin-1") if ch.isalpha())
print(c, end="")
PY
c="$(cat "$tmp/stopchar")"
run "$ck" --temperature 0 --stop "$c" > "$tmp/stop.txt"
python3 - "$tmp/g1.txt" "$tmp/stop.txt" "$c" <<'PY'
import sys
g1 = open(sys.argv[1], "rb").read().split(b"\ngenerated ")[0]
st = open(sys.argv[2], "rb").read().split(b"\ngenerated ")[0]
c = sys.argv[3].encode()
want = g1[:g1.index(c, len(b"The cat ")) + 1]
assert st == want, (st, want)
print("--stop", c, "->", st)
PY
# NaN compares false with everything: it used to pass the range check and sample.
for bad in "--temperature nan:--temperature must be a finite number >= 0" "--temperature inf:--temperature must be a finite number" \
           "--top_p nan:--top_p must be in (0, 1]" "--top_k -1:--top_k must be >= 0"; do
  if "$gen" --checkpoint "$ck" ${bad%%:*} > /dev/null 2> "$tmp/err.txt"; then echo "${bad%%:*} was accepted"; exit 1; fi
  grep -qF -- "${bad#*:}" "$tmp/err.txt" || { echo "${bad%%:*}:"; cat "$tmp/err.txt"; exit 1; }
done
# tokenizer.json (issue 30): a small dataset of sentences, each its own document.
cp "$tokenizer_json" "$tmp/tokenizer.json"
python3 - > "$tmp/text.txt" <<'PY'
import random
r = random.Random(1)
w = "the cat sat on a mat and the dog ran to see it while birds sang in trees".split()
for _ in range(300):
    print(" ".join(r.choice(w) for _ in range(r.randint(8, 30))).capitalize() + ".\n")
PY
"$make_indexed" --output="$tmp/hf" --documents=paragraph --append_eod --eod_token='<|end_of_text|>' \
  --tokenizer_json="$tmp/tokenizer.json" "$tmp/text.txt" 2> /dev/null
"$train" --run_dir "$tmp/hfrun" --set "model.n_layer=1,model.vocab_size=272,data.source=indexed,data.path=$tmp/hf,data.tokenizer_json=$tmp/tokenizer.json,train.steps=300,train.micro_batch=2,train.global_batch=4,train.eval_every=0,train.log_every=100,checkpoint.every=300" > "$tmp/hftrain.log"
hck="$tmp/hfrun/checkpoints"
for seed in 1 2 3 4 5 6 7 8; do
  "$gen" --checkpoint "$hck" --prompt "The cat sat" --max_tokens 60 --seed $seed > "$tmp/hf$seed.txt" 2> "$tmp/hferr$seed.txt"
  grep -qF "(tokenizer $tmp/tokenizer.json from the checkpoint's recipe)" "$tmp/hferr$seed.txt"
  grep -qF "(stops at <|end_of_text|>, id 270)" "$tmp/hferr$seed.txt"
done
python3 - "$tmp" <<'PY'
import sys
t = sys.argv[1]
stopped = 0
for seed in range(1, 9):
    body = open(f"{t}/hf{seed}.txt", "rb").read().rsplit(b"\ngenerated ", 1)[0]
    assert body.startswith(b"The cat sat"), body
    assert b"<|" not in body and b"<2" not in body, body  # no raw ids or special tokens printed
    # The trained words and spaces, not byte-level symbols (Ġ): it decoded.
    assert "Ġ" not in body.decode("utf-8", "replace"), body
    err = open(f"{t}/hferr{seed}.txt").read()
    stopped += "(stopped at <|end_of_text|>)" in err
assert stopped > 0, "no sample ended at <|end_of_text|>"
print("tokenizer.json: %d of 8 samples ended at <|end_of_text|>" % stopped)
PY
mv "$tmp/tokenizer.json" "$tmp/moved.json"
if "$gen" --checkpoint "$hck" --prompt "The" --max_tokens 4 > /dev/null 2> "$tmp/err.txt"; then
  echo "a missing tokenizer.json was accepted"; exit 1
fi
grep -qF "records the tokenizer $tmp/tokenizer.json, which is not there: give it with --tokenizer_json" "$tmp/err.txt"
"$gen" --checkpoint "$hck" --tokenizer_json "$tmp/moved.json" --prompt "The cat sat" --max_tokens 60 --seed 1 > "$tmp/hfmoved.txt" 2> /dev/null
python3 - "$tmp/hf1.txt" "$tmp/hfmoved.txt" <<'PY'
import sys
a, b = (open(f, "rb").read().rsplit(b"\ngenerated ", 1)[0] for f in sys.argv[1:])
assert a == b, (a, b)
PY
# tokenizer.model (issue 30): the same sentences through a SentencePiece BPE
# (testdata/spm/bpe.model: Llama-2 style, 800 pieces, byte fallback), </s> after each.
cp "$tokenizer_model" "$tmp/tokenizer.model"
"$make_indexed" --output="$tmp/spm" --documents=paragraph --append_eod \
  --tokenizer_model="$tmp/tokenizer.model" "$tmp/text.txt" 2> /dev/null
"$train" --run_dir "$tmp/spmrun" --set "model.n_layer=1,model.vocab_size=800,data.source=indexed,data.path=$tmp/spm,data.tokenizer_model=$tmp/tokenizer.model,train.steps=300,train.micro_batch=2,train.global_batch=4,train.eval_every=0,train.log_every=100,checkpoint.every=300" > "$tmp/spmtrain.log"
sck="$tmp/spmrun/checkpoints"
for seed in 1 2 3 4 5 6 7 8; do
  "$gen" --checkpoint "$sck" --prompt "The cat sat" --max_tokens 60 --seed $seed > "$tmp/spm$seed.txt" 2> "$tmp/spmerr$seed.txt"
  grep -qF "(tokenizer $tmp/tokenizer.model from the checkpoint's recipe)" "$tmp/spmerr$seed.txt"
  grep -qF "(stops at </s>, id 2)" "$tmp/spmerr$seed.txt"
done
python3 - "$tmp" <<'PY'
import sys
t = sys.argv[1]
stopped = 0
for seed in range(1, 9):
    body = open(f"{t}/spm{seed}.txt", "rb").read().rsplit(b"\ngenerated ", 1)[0]
    assert body.startswith(b"The cat sat"), body
    text = body.decode("utf-8", "replace")
    # Decoded pieces: spaces, not "▁"; bytes, not "<0x0A>"; no </s>.
    assert "\u2581" not in text and "<0x" not in text and "</s>" not in text, body
    stopped += "(stopped at </s>)" in open(f"{t}/spmerr{seed}.txt").read()
assert stopped > 0, "no sample ended at </s>"
print("tokenizer.model: %d of 8 samples ended at </s>" % stopped)
PY
mv "$tmp/tokenizer.model" "$tmp/moved.model"
if "$gen" --checkpoint "$sck" --prompt "The" --max_tokens 4 > /dev/null 2> "$tmp/err.txt"; then
  echo "a missing tokenizer.model was accepted"; exit 1
fi
grep -qF "records the tokenizer $tmp/tokenizer.model, which is not there: give it with --tokenizer_model" "$tmp/err.txt"
"$gen" --checkpoint "$sck" --tokenizer_model "$tmp/moved.model" --prompt "The cat sat" --max_tokens 60 --seed 1 > "$tmp/spmmoved.txt" 2> /dev/null
python3 - "$tmp/spm1.txt" "$tmp/spmmoved.txt" <<'PY'
import sys
a, b = (open(f, "rb").read().rsplit(b"\ngenerated ", 1)[0] for f in sys.argv[1:])
assert a == b, (a, b)
PY
if "$gen" --checkpoint "$sck" --tokenizer_model "$tmp/moved.model" --tokenizer_json "$tmp/moved.json" \
    --prompt "The" > /dev/null 2> "$tmp/err.txt"; then
  echo "two tokenizers were accepted"; exit 1
fi
grep -qF "give one of --vocab/--merges, --tokenizer_json and --tokenizer_model, not two" "$tmp/err.txt"
echo PASS
