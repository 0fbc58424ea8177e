#!/usr/bin/env bash
# tools/eval against the trainer (issue 18): train gpt_tiny under TP2·GTP2
# with a validation pass at steps 4 and 8; eval of each step's checkpoint —
# on the saved layout, and resharded to one rank with the same samples —
# equals the validation loss the trainer wrote in metrics.jsonl for that
# step within 1e-5 relative; perplexity is exp(loss); tokens = samples × T.
set -euo pipefail
train="$1" ev="$2" ckpt="$3"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
"$train" --run_dir "$tmp/run" --set "model.n_layer=2,model.seq_len=32,train.steps=8,train.micro_batch=2,train.global_batch=4,train.eval_every=4,train.eval_batches=3,train.log_every=4,checkpoint.every=4" > "$tmp/train.log"
ck="$tmp/run/checkpoints"
single="parallel.world_size=1,parallel.tp=1,parallel.tp_num_weight_shards=1"
for step in 4 8; do
  dir="$ck/$(printf 'iter_%07d' $step)"
  "$ev" --checkpoint "$dir" > "$tmp/saved_$step.txt"
  "$ev" --checkpoint "$dir" --set "$single" > "$tmp/single_$step.txt"
done
"$ev" --checkpoint "$ck" > "$tmp/latest.txt"  # the root: its latest (step 8)
# Another sample count is another loss (the samples matter), and must split into micro-batches.
"$ev" --checkpoint "$ck" --set "$single" --samples 4 > "$tmp/four.txt"
if "$ev" --checkpoint "$ck" --samples 3 2> "$tmp/err.txt"; then echo "3 samples over 2 lanes of 2 accepted"; exit 1; fi
grep -q "multiple of 4" "$tmp/err.txt"
# More samples than the validation split holds were scored several times over, silently.
if "$ev" --checkpoint "$ck" --samples 100000 2> "$tmp/err.txt"; then echo "100000 samples accepted"; exit 1; fi
grep -q "^error: --samples: .*100000 validation samples, but the validation split holds [0-9]* samples of 32 tokens: give at most [0-9]* (a multiple of 4)$" "$tmp/err.txt" || { cat "$tmp/err.txt"; exit 1; }
# An imported checkpoint (its recipe has only the model) evaluates with the
# trainer's defaults filled in; the same weights and samples give step 8's loss.
# (It used to fail: "the saved layout does not divide its world size".)
"$ckpt" export --format hf "$ck" "$tmp/hf" > /dev/null
"$ckpt" import --format hf "$tmp/hf" "$tmp/imported" > /dev/null
"$ev" --checkpoint "$tmp/imported" --set train.micro_batch=2 --samples 12 > "$tmp/imported.txt"
python3 - "$tmp" <<'PY'
import json, math, re, sys
t = sys.argv[1]
val = {}
for line in open(f"{t}/run/metrics.jsonl"):
    r = json.loads(line)
    if "val_loss" in r: val[r["step"]] = r["val_loss"]
assert sorted(val) == [4, 8], val
def parse(name):
    s = open(f"{t}/{name}").read()
    m = re.fullmatch(r"loss ([0-9.]+)  perplexity ([0-9.]+)  tokens (\d+)\n", s)
    assert m, s
    loss, ppl, tok = float(m.group(1)), float(m.group(2)), int(m.group(3))
    assert abs(ppl - math.exp(loss)) <= 1e-3 * ppl, s
    return loss, tok
for step in (4, 8):
    for kind in ("saved", "single"):
        loss, tok = parse(f"{kind}_{step}.txt")
        assert tok == 3 * 2 * 2 * 32, tok  # eval_batches × micro_batch × 2 lanes × seq_len
        assert abs(loss - val[step]) <= 1e-5 * val[step], (kind, step, loss, val[step])
        print(f"step {step} {kind}: eval {loss:.6f} trainer {val[step]:.6f}")
assert parse("latest.txt")[0] == parse("saved_8.txt")[0]
imported = parse("imported.txt")
assert imported[1] == 12 * 32 and abs(imported[0] - val[8]) <= 1e-5 * val[8], (imported, val[8])
print(f"imported: eval {imported[0]:.6f} trainer {val[8]:.6f}")
four = parse("four.txt")
assert four[1] == 4 * 32 and abs(four[0] - val[8]) > 1e-4, four
assert val[4] != val[8]
PY
echo PASS
