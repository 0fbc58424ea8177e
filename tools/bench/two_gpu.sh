#!/usr/bin/env bash
# tools/bench/two_gpu.sh — issue 19's 350M comparison in one device call:
# gtp GTP2 and DP2 (2 NCCL processes each) and PyTorch FSDP2 (fully_shard,
# reshard_after_forward, bf16 params / f32 reduction) and DDP (bf16 autocast,
# torch.compile where it runs) via torch.distributed.run, all on the 350M
# shape (24L, C=1024, 16 heads, GPT-2 vocabulary, T=1024) at the same global
# batch (GLOBAL=16: micro-batch MICRO=8 per GPU), bf16, STEPS=30, medians
# after SKIP=10. On the GPU machine, after `tools/gpu.sh bundle` here:
#
#   run(command="bash tools/bench/two_gpu.sh", carry=[".bundle"], kind="nvidia-h200-x2")
#   bash tools/bench/two_gpu.sh 2 --dry_run
#
# Usage: two_gpu.sh [N] [--dry_run]     (N: GPUs, default all found; 2 are used)
# With one GPU it degrades, and says so in the rows: GTP2 and DP2 each run on
# 1 GPU (an NCCL world of one under gtprun), FSDP2 and DDP at world size 1, at
# the same global batch (2 micro-batches accumulated) — a smoke test of the
# scripts, not the comparison.
# The table (tools/bench/dist_table.py; ratios vs GTP2) ends with the issue's
# targets as MET / NOT MET: GTP2 ≥ 0.95× DP2, ≥ 2× FSDP2, ≥ 1.1× DDP
# tokens/s; GTP2's weight + grad + optimizer bytes ≤ 55% of DP2's; GTP2's
# exposed communication ≤ 5% of the step. Settings as scaling.sh (STEPS SKIP
# MICRO GLOBAL PRECISION DATA GTP_SET TORCH_ARGS ...); add
# GTP_SET=train.trace_steps=3 for the Chrome traces (trace.rank*.json in the
# run dirs, in the logs tarball under $OUT/two_gpu).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
source "$ROOT/tools/bench/layouts.sh"
N="" DRY=()
while (($#)); do
  case "$1" in
    --dry_run) DRY=(--dry_run) ;;
    *) [[ "$1" =~ ^[0-9]+$ && -z "$N" ]] || { echo "usage: two_gpu.sh [N] [--dry_run]" >&2; exit 2; }; N="$1" ;;
  esac
  shift
done
[[ -n "$N" ]] || N="$(count_gpus)"
DEGRADE=()
if ((N < 2)); then
  echo "two_gpu: $N GPU(s): degraded smoke test — every run on 1 GPU, no two-GPU figures"
  DEGRADE=(--degrade)
  N=1
else
  N=2
fi
export MICRO="${MICRO:-8}"
export GLOBAL="${GLOBAL:-$((MICRO * 2))}" BENCH_NAME="${BENCH_NAME:-two_gpu}"
exec bash "$ROOT/tools/bench/scaling.sh" "$N" "${DRY[@]}" "${DEGRADE[@]}" --models 350m --layouts "gtp2 dp2" \
  --weak "" --torch "fsdp2 ddp" --ref GTP2 \
  --check "tokens:GTP2/DP2>=0.95" --check "tokens:GTP2/FSDP2>=2" --check "tokens:GTP2/DDP>=1.1" \
  --check "state:GTP2/DP2<=0.55" --check "comm:GTP2<=0.05"
