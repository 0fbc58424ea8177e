#!/usr/bin/env bash
# The gtp side of bench.sh on CPU with a tiny model: the token dump has every
# micro-batch, the iteration-0 checkpoint exports, and a pure-Python forward
# of those weights on the first step's dumped batches gives gtp's step-1 loss.
set -euo pipefail
bench="$1" train="$2" ckpt="$3"
dir="$(dirname "$bench")"
export TMPDIR="${TEST_TMPDIR:-$(mktemp -d)}"
export DEVICE=cpu VOCAB=256 N_LAYER=1 N_EMBD=16 N_HEAD=2 SEQ=8 B=2 GLOBAL_BATCH=4 STEPS=3
export DATA=mock SKIP=0 AGREE_FROM=1 GTP_TRAIN="$train" GTP_CKPT="$ckpt"
# f32: the f64 forward matches to 1e-5; bf16: the export holds the f32 masters,
# so they match to bf16 rounding.
for case in "f32 1e-5" "bf16 1e-3"; do
  read -r PRECISION tol <<< "$case"
  export PRECISION
  log="$TMPDIR/bench_$PRECISION.log"
  bash "$bench" > "$log" 2>&1 || { cat "$log"; exit 1; }
  cat "$log"
  work="$(awk '/^bench: work dir/ {print $4}' "$log")"
  [[ -d "$work/gtp/checkpoints/iter_0000000" ]] || { echo "no iteration-0 checkpoint"; exit 1; }
  [[ "$(stat -c %s "$work/tokens.bin")" == $((3 * 2 * 2 * 2 * 8 * 4)) ]] || { echo "bad dump size"; exit 1; }
  ours="$(python3 "$dir/step1_loss.py" "$work" 2 8 16 2 1 2)"
  gtp="$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["loss"])' "$work/gtp/metrics.jsonl")"
  echo "$PRECISION step-1 loss: gtp $gtp, python f64 $ours"
  python3 -c 'import sys; a, b, t = map(float, sys.argv[1:]); sys.exit(abs(a - b) > t * abs(b))' "$gtp" "$ours" "$tol"
  grep -q "| gtp-$PRECISION |" "$log"
done
# The MoE case: gtp trains the MoE shape; no export (torch starts from its own weights).
log="$TMPDIR/bench_moe.log"
PRECISION=f32 MOE_EXPERTS=4 MOE_FFN=32 bash "$bench" > "$log" 2>&1 || { cat "$log"; exit 1; }
grep -q "model.moe.num_experts=4" "$log" || { echo "MoE settings not passed"; exit 1; }
grep -q "| gtp-f32 |" "$log" || { cat "$log"; exit 1; }
# The hybrid case: gtp trains a Mamba-2 / attention / MLP stack; no export, no torch.
log="$TMPDIR/bench_hybrid.log"
PRECISION=f32 HYBRID_PATTERN="M*-" MAMBA_HEAD_DIM=8 MAMBA_CHUNK=4 bash "$bench" > "$log" 2>&1 || { cat "$log"; exit 1; }
grep -q "model.layer_pattern=M\*-,model.mamba.head_dim=8,model.mamba.chunk=4" "$log" || { cat "$log"; echo "hybrid settings not passed"; exit 1; }
grep -q 'model: hybrid "M\*-" L=3' "$log" || { cat "$log"; exit 1; }
grep -q "| gtp-f32 |" "$log" || { cat "$log"; exit 1; }
echo ok
