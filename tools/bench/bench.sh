#!/usr/bin/env bash
# tools/bench/bench.sh — gtp's GPT trainer vs PyTorch (eager and torch.compile)
# on the same model, the same initial weights and the same token batches, in
# one call on the GPU machine, from the repository root, after
# `tools/gpu.sh bundle` here:
#
#   run(command="bash tools/bench/bench.sh", carry=[".bundle"])
#
# 1. gtp (recipes_gpt_124m_train from the bundle, config
#    recipes/gpt_124m/gpt_124m.pbtxt, every setting below passed by --set)
#    trains STEPS steps with checkpoint.save_initial and train.dump_tokens;
# 2. `ckpt export --names hf-gpt2 --vocab V` turns its iteration-0
#    checkpoint into safetensors;
# 3. tools/bench/torch_gpt.py trains PyTorch from those weights on the
#    dumped batches, once per mode in MODES;
# 4. tools/bench/compare.py prints: run | median ms/step | tokens/s | MFU |
#    peak mem | vs torch-compile, the per-step losses and the loss agreement
#    over steps AGREE_FROM..STEPS.
#
# Settings (environment; defaults: GPT-2 124M, B=8, T=1024, the recipe's optimizer):
#   N_LAYER=12 N_EMBD=768 N_HEAD=12 VOCAB=50257 SEQ=1024   model (GPT-2 family)
#   B=8 GLOBAL_BATCH=$B STEPS=200                          batch, steps
#   PRECISION=bf16                                         gtp train.precision and
#                                                          torch autocast (f32: off)
#   DATA=corpus                                            corpus (embedded bytes,
#                                                          tokens < 256 in vocab V:
#                                                          the loss falls) | mock
#                                                          (uniform tokens in [0, V))
#   LR=6e-4 MIN_LR=6e-5 WARMUP=10 DECAY=cosine WD=0.1 BETA1=0.9 BETA2=0.95 CLIP=1.0 SEED=1234
#   MODES="eager compile"   torch runs      SKIP=10   steps left out of medians
#   AGREE_FROM=21           PEAK_TFLOPS=989 (H200 dense bf16, per GPU)
#   GTP_SET="k=v,..."       extra gtp --set overrides (applied last)
#   DEVICE=cuda             gtp train.device (cpu: gtp side only, for a smoke test)
#   MOE_EXPERTS=0           > 0: every MLP a mixture of this many experts (gtp
#                           model.moe; torch_gpt.py's MoE, torch._grouped_mm
#                           where torch has it), with MOE_TOP_K=2 MOE_FFN=0 (4·C)
#                           AUX=0.01 ZLOSS=0.001. Speed only: torch starts from
#                           its own random weights, so losses are not compared.
#   HYBRID_PATTERN=         a hybrid Mamba-2 stack instead (gtp model.layer_pattern,
#                           e.g. "M*-M*-M*-M*-M*-M*-": 'M' Mamba-2, '*' attention,
#                           '-' MLP; N_LAYER follows the pattern), with
#                           MAMBA_D_STATE MAMBA_HEAD_DIM MAMBA_N_GROUPS MAMBA_EXPAND
#                           MAMBA_CHUNK (unset: the trainer's defaults, 16 16 1 2
#                           128). gtp only: no export, no torch runs; the table
#                           has ms/step and tokens/s (its MFU column is "—": the
#                           dense FLOP count does not fit the pattern).
#   GTP_TRAIN=, GTP_CKPT=   binaries to use instead of the bundle's
#   PYTHON=python3
# Everything goes under a fresh temp dir (printed); the table and the logs are
# copied to $OUT when it is set.
# Several GPUs: nccl_parity.sh, two_gpu.sh, scaling.sh (tools/bench/README.md).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"

N_LAYER="${N_LAYER:-12}" N_EMBD="${N_EMBD:-768}" N_HEAD="${N_HEAD:-12}"
VOCAB="${VOCAB:-50257}" SEQ="${SEQ:-1024}"
B="${B:-8}" GLOBAL_BATCH="${GLOBAL_BATCH:-${B:-8}}" STEPS="${STEPS:-200}"
PRECISION="${PRECISION:-bf16}" DATA="${DATA:-corpus}" DEVICE="${DEVICE:-cuda}"
LR="${LR:-6e-4}" MIN_LR="${MIN_LR:-6e-5}" WARMUP="${WARMUP:-10}" DECAY="${DECAY:-cosine}"
WD="${WD:-0.1}" BETA1="${BETA1:-0.9}" BETA2="${BETA2:-0.95}" CLIP="${CLIP:-1.0}" SEED="${SEED:-1234}"
MODES="${MODES:-eager compile}" SKIP="${SKIP:-10}" AGREE_FROM="${AGREE_FROM:-21}"
PEAK_TFLOPS="${PEAK_TFLOPS:-989}" GTP_SET="${GTP_SET:-}" PYTHON="${PYTHON:-python3}"
MOE_EXPERTS="${MOE_EXPERTS:-0}" MOE_TOP_K="${MOE_TOP_K:-2}" MOE_FFN="${MOE_FFN:-0}"
AUX="${AUX:-0.01}" ZLOSS="${ZLOSS:-0.001}"
HYBRID_PATTERN="${HYBRID_PATTERN:-}"
if [[ -n "$HYBRID_PATTERN" ]]; then
  N_LAYER="$(printf '%s' "$HYBRID_PATTERN" | tr -cd 'M*E-' | wc -c)"  # '|' is no layer
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/gtp_bench.XXXXXX")"
echo "bench: work dir $WORK"

# Binaries: the bundle's (tools/gpu.sh names //a/b:c as a_b_c), unpacked
# and run the way `tools/gpu.sh run` does.
if [[ -z "${GTP_TRAIN:-}" || -z "${GTP_CKPT:-}" ]]; then
  BUNDLE_TAR="${GTP_BUNDLE_DIR:-$ROOT/.bundle}/bundle.tar.xz"  # as tools/gpu.sh
  [[ -f "$BUNDLE_TAR" ]] || { echo "bench: no $BUNDLE_TAR (run tools/gpu.sh bundle and carry .bundle)" >&2; exit 1; }
  mkdir -p "$WORK/bundle"
  tar -C "$WORK/bundle" -xJf "$BUNDLE_TAR"
  export LD_LIBRARY_PATH="$WORK/bundle/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
  export NCCL_NVLS_ENABLE=0
  export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-8}"
fi
TRAIN="${GTP_TRAIN:-$WORK/bundle/bin/recipes_gpt_124m_train}"
CKPT="${GTP_CKPT:-$WORK/bundle/bin/tools_ckpt_ckpt}"
[[ -x "$TRAIN" ]] || { echo "bench: no binary $TRAIN: bundle //recipes/gpt_124m:train (tools/gpu.sh bundle's default set has it)" >&2; exit 1; }
[[ -x "$CKPT" ]] || { echo "bench: no binary $CKPT: bundle //tools/ckpt:ckpt (tools/gpu.sh bundle's default set has it)" >&2; exit 1; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true

# 1. gtp.
SET="model.vocab_size=$VOCAB,model.seq_len=$SEQ,model.n_layer=$N_LAYER,model.n_embd=$N_EMBD,model.n_head=$N_HEAD"
SET+=",data.source=$DATA,data.seed=$SEED"
SET+=",optim.lr=$LR,optim.min_lr=$MIN_LR,optim.warmup_steps=$WARMUP,optim.decay=$DECAY,optim.weight_decay=$WD"
SET+=",optim.beta1=$BETA1,optim.beta2=$BETA2,optim.clip_grad=$CLIP"
SET+=",train.steps=$STEPS,train.micro_batch=$B,train.global_batch=$GLOBAL_BATCH,train.seed=$SEED"
SET+=",train.log_every=10,train.eval_every=0,train.device=$DEVICE,train.peak_tflops=$PEAK_TFLOPS"
[[ -n "$PRECISION" ]] && SET+=",train.precision=$PRECISION"
TORCH_MODEL=(--weights "$WORK/init.safetensors")
if [[ "$MOE_EXPERTS" -gt 0 ]]; then
  SET+=",model.moe.num_experts=$MOE_EXPERTS,model.moe.top_k=$MOE_TOP_K,model.moe.aux_loss_coeff=$AUX,model.moe.z_loss_coeff=$ZLOSS"
  [[ "$MOE_FFN" -gt 0 ]] && SET+=",model.moe.ffn_hidden=$MOE_FFN"
  TORCH_MODEL=(--moe_experts "$MOE_EXPERTS" --moe_top_k "$MOE_TOP_K" --moe_ffn "$MOE_FFN"
               --aux_coeff "$AUX" --z_coeff "$ZLOSS")
fi
HYBRID_ARGS=()
if [[ -n "$HYBRID_PATTERN" ]]; then
  SET+=",model.layer_pattern=$HYBRID_PATTERN"
  for kv in d_state=MAMBA_D_STATE head_dim=MAMBA_HEAD_DIM n_groups=MAMBA_N_GROUPS expand=MAMBA_EXPAND chunk=MAMBA_CHUNK; do
    var="${kv#*=}"
    if [[ -n "${!var:-}" ]]; then SET+=",model.mamba.${kv%%=*}=${!var}"; fi
  done
  HYBRID_ARGS=(--layer_pattern "$HYBRID_PATTERN")
  SET+=",train.dump_tokens=$WORK/tokens.bin,checkpoint.every=0,checkpoint.no_resume=true"
else
  SET+=",train.dump_tokens=$WORK/tokens.bin,checkpoint.save_initial=true,checkpoint.every=0,checkpoint.no_resume=true"
fi
[[ -n "$GTP_SET" ]] && SET+=",$GTP_SET"
echo "bench: gtp --set $SET"
"$TRAIN" --config "$ROOT/recipes/gpt_124m/gpt_124m.pbtxt" --run_dir "$WORK/gtp" --noprogress --set "$SET" 2>&1 | tee "$WORK/gtp.log"

# The dump must hold every micro-batch: STEPS × (GLOBAL_BATCH / B) × 2 × [B, SEQ] int32.
want=$((STEPS * GLOBAL_BATCH * 2 * SEQ * 4))
have=$(stat -c %s "$WORK/tokens.bin")
[[ "$have" == "$want" ]] || { echo "bench: tokens.bin has $have bytes, expected $want" >&2; exit 1; }

# 2. Initial weights → safetensors (the dense GPT-2 family only).
[[ "$MOE_EXPERTS" -gt 0 || -n "$HYBRID_PATTERN" ]] || "$CKPT" export --format safetensors --names hf-gpt2 --vocab "$VOCAB" "$WORK/gtp/checkpoints/iter_0000000" "$WORK/init.safetensors"

# 3. PyTorch on the same weights and batches.
torch_json=()
if [[ "$DEVICE" == cuda && -z "$HYBRID_PATTERN" ]]; then
  for mode in $MODES; do
    "$PYTHON" tools/bench/torch_gpt.py "${TORCH_MODEL[@]}" --tokens "$WORK/tokens.bin" \
      --n_layer "$N_LAYER" --n_embd "$N_EMBD" --n_head "$N_HEAD" --vocab "$VOCAB" --seq_len "$SEQ" \
      --micro_batch "$B" --global_batch "$GLOBAL_BATCH" --steps "$STEPS" \
      --lr "$LR" --min_lr "$MIN_LR" --warmup_steps "$WARMUP" --decay "$DECAY" --weight_decay "$WD" \
      --beta1 "$BETA1" --beta2 "$BETA2" --clip_grad "$CLIP" --mode "$mode" --precision "${PRECISION:-bf16}" \
      --peak_tflops "$PEAK_TFLOPS" --skip "$SKIP" --json "$WORK/torch_$mode.json" 2>&1 | tee "$WORK/torch_$mode.log" ||
      echo "bench: torch $mode failed (log: torch_$mode.log); the table goes on without it" >&2
    if [[ -f "$WORK/torch_$mode.json" ]]; then torch_json+=(--torch "$WORK/torch_$mode.json"); fi
  done
fi

# 4. The table.
"$PYTHON" tools/bench/compare.py --gtp "$WORK/gtp/metrics.jsonl" --gtp_name "gtp-${PRECISION:-default}" \
  "${torch_json[@]}" "${HYBRID_ARGS[@]}" --vocab "$VOCAB" --seq_len "$SEQ" --n_layer "$N_LAYER" --n_embd "$N_EMBD" \
  --peak_tflops "$PEAK_TFLOPS" --skip "$SKIP" --agree_from "$AGREE_FROM" | tee "$WORK/table.txt"

if [[ -n "${OUT:-}" ]]; then
  mkdir -p "$OUT/bench"
  cp "$WORK/table.txt" "$WORK/gtp.log" "$WORK/gtp/metrics.jsonl" "$OUT/bench/"
  cp "$WORK"/torch_*.log "$WORK"/torch_*.json "$OUT/bench/" 2>/dev/null || true
  echo "bench: table and logs in \$OUT/bench"
fi
