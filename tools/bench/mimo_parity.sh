#!/usr/bin/env bash
# tools/bench/mimo_parity.sh — MIMO layouts as processes (issue 27): the
# vision-language recipe (recipes/vlm_mimo) under `gtprun --nproc W`, its
# encoder and language model on disjoint or shared rank grids joined by the
# bridge, against the same model, data and global batch on one rank; every
# step's loss (the mean over the language lanes) compared. On the GPU
# machine the ranks are NCCL processes (sharing one GPU when they outnumber
# the GPUs: gtprun's shared-GPU mode) and the bridge moves device memory:
#
#   run(command="bash tools/bench/mimo_parity.sh", carry=[".bundle"])
#   DEVICE=cpu bash tools/bench/mimo_parity.sh        UCX processes on the CPU
#
# Cells (name: ranks, layout):
#   disjoint    2  encoder 1 rank | language 1 rank (1:1, point-to-point)
#   fan_in      3  encoder DP2 on 2 ranks | language 1 rank (2 lanes → 1)
#   fan_out     3  encoder 1 rank | language DP2 on 2 ranks (1 lane → 2)
#   tp2gtp2     5  encoder 1 rank | language TP2·GTP2 on 4 ranks (1 → 2 lanes,
#                  each lane's leader broadcasting to its TP partner)
#   colocated   2  encoder DP2 and language TP2 on the same 2 ranks (a
#                  colocated fan-in: an all-gather in bridge-made groups)
# Reference: one rank, both modules on it (threads-free, no launcher).
#
# Every step within TOL=1e-5 relative of the reference (f32: the lanes sum
# the same gradients in another order — the MIMO tests' tolerance; Muon's
# Newton–Schulz iterations and 8 steps of updates carry that on, measured
# below 2e-6 on the CPU, 2026-12-03).
#
# Environment: DEVICE=cuda|cpu (default cuda), STEPS=8, TOL, CELLS (names),
# WIDTH (default 256 on cuda: the CUDA attention kernels take head size 64 or
# 128; 64 on cpu), CELL_TIMEOUT=180 s, VLM and GTPRUN (binaries instead of
# the bundle's), OUT (the table and logs go to $OUT/mimo_parity).
# Prints the PASS/FAIL table (tools/bench/parity.py); exits 1 when a cell failed.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
DEVICE="${DEVICE:-cuda}" STEPS="${STEPS:-8}" TOL="${TOL:-1e-5}" CELL_TIMEOUT="${CELL_TIMEOUT:-180}"
CELLS="${CELLS:-disjoint fan_in fan_out tp2gtp2 colocated}" PYTHON="${PYTHON:-python3}"
WIDTH="${WIDTH:-}"
[[ -n "$WIDTH" ]] || { [[ "$DEVICE" == cuda ]] && WIDTH=256 || WIDTH=64; }

WORK="$(mktemp -d "${TMPDIR:-/tmp}/gtp_mimo_parity.XXXXXX")"
if [[ -z "${VLM:-}" || -z "${GTPRUN:-}" ]]; then
  tar="${GTP_BUNDLE_DIR:-$ROOT/.bundle}/bundle.tar.xz"
  [[ -f "$tar" ]] || { echo "no $tar (run tools/gpu.sh bundle here and carry .bundle)" >&2; exit 1; }
  mkdir -p "$WORK/bundle"
  tar -C "$WORK/bundle" -xJf "$tar"
  export LD_LIBRARY_PATH="$WORK/bundle/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
  export NCCL_NVLS_ENABLE=0
fi
VLM="${VLM:-$WORK/bundle/bin/recipes_vlm_mimo_train}" GTPRUN="${GTPRUN:-$WORK/bundle/bin/tools_gtprun_gtprun}"
for b in "$VLM" "$GTPRUN"; do [[ -x "$b" ]] || { echo "no binary $b" >&2; exit 1; }; done
echo "mimo_parity: work dir $WORK ($DEVICE), $STEPS steps, width $WIDTH"
COMMON=(--device="$DEVICE" --steps="$STEPS" --log_every=1 --eval_batches=1 --width="$WIDTH")

cell_args() {  # name -> "ranks|flags"
  case "$1" in
    disjoint) echo "2|--encoder_ranks=1 --language_ranks=1 --language_tp=1 --language_gtp=1" ;;
    fan_in) echo "3|--encoder_ranks=2 --language_ranks=1 --language_tp=1 --language_gtp=1" ;;
    fan_out) echo "3|--encoder_ranks=1 --language_ranks=2 --language_tp=1 --language_gtp=1" ;;
    tp2gtp2) echo "5|--encoder_ranks=1 --language_ranks=4 --language_tp=2 --language_gtp=2" ;;
    colocated) echo "2|--colocated --encoder_ranks=2 --language_ranks=2 --language_tp=2 --language_gtp=1" ;;
    *) echo "mimo_parity: unknown cell '$1'" >&2; return 1 ;;
  esac
}
# A run's step lines as metrics.jsonl (what parity.py reads).
to_jsonl() {
  sed -n 's/^\(\[rank [0-9]*\] \)\{0,1\}step *\([0-9]*\)\/[0-9]*  loss \([-0-9.einf]*\).*/{"step": \2, "loss": \3}/p' "$1" > "$2"
}
run_cell() {  # log ranks flags...
  local log="$1" ranks="$2"; shift 2
  local cmd=()
  ((ranks > 0)) && cmd=("$GTPRUN" --nproc "$ranks" --)
  cmd+=("$VLM" "${COMMON[@]}" "$@")
  local t0=$SECONDS rc=0
  timeout -k 10 "$CELL_TIMEOUT" "${cmd[@]}" > "$log" 2>&1 || rc=$?
  echo "mimo_parity: $(basename "$log" .log) rc $rc in $((SECONDS - t0)) s"
  return "$rc"
}
tail_reason() { { grep -E 'error|Error|failed|FAILED' "$1" 2>/dev/null || true; } | tail -1 | tr '\t|' '  ' | cut -c1-160; }
save() {
  [[ -n "${OUT:-}" ]] || return 0
  mkdir -p "$OUT/mimo_parity"
  cp "$WORK"/*.log "$WORK"/*.jsonl "$WORK"/cells.tsv "$WORK"/table.md "$OUT/mimo_parity/" 2>/dev/null || true
}
trap save EXIT

TSV="$WORK/cells.tsv"
: > "$TSV"
run_cell "$WORK/ref.log" 0 --colocated --encoder_ranks=1 --language_ranks=1 --language_tp=1 --language_gtp=1 ||
  { tail -5 "$WORK/ref.log"; echo "mimo_parity: the one-rank reference failed" >&2; exit 1; }
to_jsonl "$WORK/ref.log" "$WORK/ref.jsonl"
for c in $CELLS; do
  IFS='|' read -r ranks flags < <(cell_args "$c")
  # shellcheck disable=SC2086
  if run_cell "$WORK/$c.log" "$ranks" $flags; then
    to_jsonl "$WORK/$c.log" "$WORK/$c.jsonl"
    printf '%s\t%s\tf32\tran\t%s\t%s\t%s\t-\t%s\n' "$c ($flags)" "$ranks" "$WORK/ref.jsonl" \
      "$WORK/$c.jsonl" "$TOL" "" >> "$TSV"
  else
    printf '%s\t%s\tf32\terror\t-\t-\t%s\t-\t%s\n' "$c ($flags)" "$ranks" "$TOL" "$(tail_reason "$WORK/$c.log")" >> "$TSV"
  fi
done
rc=0
"$PYTHON" "$ROOT/tools/bench/parity.py" "$TSV" | tee "$WORK/table.md" || rc=$?
exit "$rc"
