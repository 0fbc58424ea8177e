#!/usr/bin/env bash
# tools/dev/losses_snapshot.sh — the numbers a refactor must not change
# (issue 33: "losses bit-identical before and after"). Runs the tiny recipes
# and writes what they computed — every metrics.jsonl record without its
# timing fields (vlm_mimo's too) — into one digest file:
#
#   bazel build //recipes/gpt_tiny:train //recipes/moe_tiny:train \
#     //recipes/hybrid_tiny:train //recipes/vlm_mimo:train
#   bash tools/dev/losses_snapshot.sh /tmp/before.txt     # on the old tree
#   ... change the code, build again ...
#   bash tools/dev/losses_snapshot.sh /tmp/after.txt
#   diff /tmp/before.txt /tmp/after.txt && echo identical
#
# Runs: gpt_tiny 12 steps (evaluation and checkpoints every 6), the same run
# resumed from its step-6 checkpoint, moe_tiny 8 steps, hybrid_tiny 8 steps,
# vlm_mimo 20 steps (about 2 minutes on 2 cores). BIN (default bazel-bin)
# names the binaries' root; the binaries must be fastbuild or opt, the same
# both times.
set -euo pipefail
out="${1:?usage: losses_snapshot.sh OUT.txt}"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BIN="${BIN:-$ROOT/bazel-bin}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
export OPENBLAS_NUM_THREADS=1
# Every record of a metrics file, timing fields dropped, keys sorted.
digest() {
  python3 - "$1" "$2" <<'PY'
import json, sys
name, path = sys.argv[1], sys.argv[2]
drop = {"ms", "tok_s", "tokens_per_s", "mfu", "time", "elapsed_s", "wall_s", "comm_ms", "exposed_ms",
        "step_ms", "data_ms", "bubble", "mem_gb", "peak_mem_gb", "timestamp",
        "mem_bytes", "peak_mem_bytes"}  # memory may move with a refactor; numbers may not
for line in open(path):
    line = line.strip()
    if not line:
        continue
    r = json.loads(line)
    keep = {k: v for k, v in r.items() if k not in drop and not k.endswith("_ms") and not k.endswith("_s")}
    print(name, json.dumps(keep, sort_keys=True))
PY
}
small="model.n_layer=2,model.seq_len=32,train.micro_batch=4,train.global_batch=8,train.log_every=1,optim.warmup_steps=5"
g="$BIN/recipes/gpt_tiny/train"
"$g" --noprogress --run_dir "$tmp/gpt" --set "$small,train.steps=12,train.eval_every=6,checkpoint.every=6" > "$tmp/gpt.log" 2>&1
mkdir -p "$tmp/resumed/checkpoints"
cp -r "$tmp/gpt/checkpoints/." "$tmp/resumed/checkpoints/"
# Resume from step 6: drop the later checkpoint and point latest at 6.
for d in "$tmp/resumed/checkpoints"/*/; do
  case "$(basename "$d")" in *12*) rm -rf "$d" ;; esac
done
echo 6 > "$tmp/resumed/checkpoints/latest"
"$g" --noprogress --run_dir "$tmp/resumed" --set "$small,train.steps=12,train.eval_every=6,checkpoint.every=6" > "$tmp/resumed.log" 2>&1
"$BIN/recipes/moe_tiny/train" --noprogress --run_dir "$tmp/moe" --set "train.steps=8,train.log_every=1,checkpoint.every=0" > "$tmp/moe.log" 2>&1
"$BIN/recipes/hybrid_tiny/train" --noprogress --run_dir "$tmp/hybrid" --set "train.steps=8,train.log_every=1,checkpoint.every=0" > "$tmp/hybrid.log" 2>&1
"$BIN/recipes/vlm_mimo/train" --noprogress --run_dir "$tmp/vlm" --set "train.steps=20,train.log_every=1,train.eval_batches=1" > "$tmp/vlm.log" 2>&1
{
  digest gpt_tiny "$tmp/gpt/metrics.jsonl"
  digest gpt_tiny_resumed "$tmp/resumed/metrics.jsonl"
  digest moe_tiny "$tmp/moe/metrics.jsonl"
  digest hybrid_tiny "$tmp/hybrid/metrics.jsonl"
  digest vlm_mimo "$tmp/vlm/metrics.jsonl"
} > "$out"
echo "losses_snapshot: $(wc -l < "$out") lines in $out"
