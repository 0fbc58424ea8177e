#!/usr/bin/env bash
# tools/bench/fp8_engine_swap.sh — is an fp8 loss that departs from bf16 the
# GEMM engine's doing, or the trajectory's? One device call (about 2 min):
#
#   (here)        tools/gpu.sh bundle //recipes/gpt_124m:train //tools/gtprun:gtprun
#   (device tool) run(command="STEP=30 bash tools/bench/fp8_engine_swap.sh", carry=[".bundle"])
#
# Trains the 350M case of fp8_check.sh (B=8, T=1024, corpus data, seed
# 1234) in fp8 with ENGINE (default cublaslt) for STEP-1 steps of a STEP-step
# schedule (optim.decay_steps=STEP), checkpoints, then runs step STEP from
# copies of that checkpoint with cublaslt and with wgmma (the one that is
# ENGINE is the restart's own check: it must repeat the uninterrupted run's
# loss, printed first). Same weights, same batch: a loss that differs between the
# engines by more than fp8's rounding is one engine's error; the same loss
# from both puts the departure in the trajectory. MODEL overrides the shape
# settings. Exit 1 when a run failed.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
source "$ROOT/tools/bench/layouts.sh"  # bench_start
bench_start fp8_engine_swap "$ROOT" || exit 2  # LOG, WORK, B
STEP="${STEP:-30}"
ENGINE="${ENGINE:-cublaslt}"
MODEL="${MODEL:-model.n_layer=24,model.n_embd=1024,model.n_head=16}"
BASE="model.vocab_size=50257,model.seq_len=1024,train.micro_batch=8,train.global_batch=8,data.source=corpus,train.log_every=1,train.eval_every=0,train.device=cuda,train.precision=fp8,optim.decay_steps=$STEP,$MODEL"
status=0
train() {  # name run-dir steps extra
  "$B/bin/recipes_gpt_124m_train" --config recipes/gpt_124m/gpt_124m.pbtxt --noprogress \
    --run_dir "$2" --set "$BASE,train.steps=$3,$4" > "$LOG/$1.log" 2>&1 || {
    echo "FAIL $1 (rc $?)"; tail -8 "$LOG/$1.log"; status=1; }
  grep -E "^step +$3/" "$LOG/$1.log" | sed "s/^/  $1: /" | cut -c1-90
}
train straight "$WORK/straight" "$STEP" "train.fp8_gemm=$ENGINE,checkpoint.disable=true"
train first "$WORK/first" "$((STEP - 1))" "train.fp8_gemm=$ENGINE,checkpoint.every=0"
for e in cublaslt wgmma; do
  rm -rf "$WORK/r_$e" && cp -r "$WORK/first" "$WORK/r_$e"
  train "resumed_$e" "$WORK/r_$e" "$STEP" "train.fp8_gemm=$e,checkpoint.disable=true"
done
rm -rf "$WORK"
exit $status
