#!/usr/bin/env bash
# tools/bench/nccl_table.sh — issue 27's whole table on one GPU, one command:
# every parity cell through the real NCCL (ranks sharing the GPU through
# gtprun's shared-GPU mode), f32 at 2, 4 and 8 ranks, bf16 against measured
# noise, MXFP8 gathers, CUDA graphs on vs off, MIMO, and rank death. On the
# GPU machine, from the repository root, after `tools/gpu.sh bundle` here:
#
#   run(command="bash tools/bench/nccl_table.sh", carry=[".bundle"])
#   bash tools/bench/nccl_table.sh --dry_run          the parts' commands, nothing run
#
# Usage: nccl_table.sh [--parts "NAME..."] [--jobs J] [--dry_run]
#   --parts   the parts to run (default: all, in the order below)
#   --jobs    parts run J at a time (default JOBS=3). The ranks are processes
#             time-slicing one GPU and talking over loopback sockets, so the
#             table is latency-bound, not compute-bound: parts side by side
#             finish sooner than one after another.
#
# Parts (each one script run of its own, in its own directory):
#   f32       nccl_parity.sh: every f32 cell of 2 and 4 ranks (8 steps, 1e-5)
#   f32_8a    the 8-rank f32 cells GTP8, DP8, TP2·GTP2·DP2 (llama), GTP4·DP2 (llama)
#   f32_8b    the 8-rank f32 cells TP4·GTP2 SP, PP2·TP2·GTP2, TP2·GTP2·DP2·EP4·EGTP2 (moe)
#   bf16_2    every bf16 cell of 2 ranks, BF16_STEPS_2=30 steps, at the measured-noise tolerance
#   bf16_4    the bf16 cells of 4 ranks, BF16_STEPS_4=20 steps (2 s a step over the sockets)
#   fp8       MXFP8 GTP gathers: GTP2, TP2·GTP2, GTP2·DP2, GTP2·DP2·EP2·EGTP2 (moe), f32 tolerance
#   graphs    CUDA graphs on vs off, bit-identical: f32, GTP2, TP2, DP2, TP2·GTP2, GTP2·DP2,
#             TP2·GTP2 SP (llama), TP2·GTP2·DP2 (llama), GTP8
#   graphs_bf16  the same in bf16 (10 steps): GTP2, TP2·GTP2, GTP2·DP2
#   mimo      mimo_parity.sh: disjoint 1+1, fan-in 2→1, fan-out 1→2, TP2·GTP2, colocated 2+2
#   death     rank death: 4 ranks, one SIGKILLed mid-step, 5 trials (tests/reliability/rank_death_test.sh)
#   fp8_gemm  (only when named in --parts) train.precision=fp8 — the linears' GEMMs in
#             block-scaled e4m3 — at the measured-noise tolerance, BF16_STEPS_2 steps:
#             GTP2, TP2, DP2, CP2, TP2·GTP2, TP2·GTP2 SP (llama), PP2·GTP2
#
# Prints each part's progress, then one PASS/FAIL/SKIP table of every row
# (tools/bench/parity.py) and the time each part took; exits 1 when a row
# failed. With OUT set, the table goes to $OUT/nccl_table/ and each part's
# table and logs to $OUT/table_<part>/.
# Environment: JOBS, TABLE_LIMIT (seconds after which parts not yet started
# are skipped, default 400), TABLE_DEADLINE (seconds at which parts still
# running are stopped and the table printed with what they finished, default
# 570: the device tool's call limit is 600),
# BF16_STEPS_2, BF16_STEPS_4, GTP_BUNDLE_DIR.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
source "$ROOT/tools/bench/layouts.sh"

ALL_PARTS="f32_8b f32_8a f32 bf16_4 graphs bf16_2 mimo fp8 graphs_bf16 death"
OPTIONAL_PARTS="fp8_gemm"  # not in the default table
PARTS="$ALL_PARTS" JOBS="${JOBS:-3}" DRY=0
TABLE_LIMIT="${TABLE_LIMIT:-400}" TABLE_DEADLINE="${TABLE_DEADLINE:-570}" BF16_STEPS_2="${BF16_STEPS_2:-30}" BF16_STEPS_4="${BF16_STEPS_4:-20}"
usage() { sed -n '/^# Usage:/,/^#             finish sooner/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while (($#)); do
  case "$1" in
    --parts) shift; PARTS="${1:-}" ;;
    --jobs) shift; [[ "${1:-}" =~ ^[1-9][0-9]*$ ]] || usage; JOBS="$1" ;;
    --dry_run) DRY=1 ;;
    -h|--help) usage ;;
    *) echo "nccl_table: unexpected argument '$1'" >&2; usage ;;
  esac
  shift
done
for p in $PARTS; do
  [[ " $ALL_PARTS $OPTIONAL_PARTS " == *" $p "* ]] ||
    { echo "nccl_table: unknown part '$p' (parts: $ALL_PARTS $OPTIONAL_PARTS)" >&2; exit 2; }
done

# The part's command (bash words); `$B` is the unpacked bundle's bin directory.
part_cmd() {
  local P="bash tools/bench/nccl_parity.sh 1"
  case "$1" in
    f32) echo "CELL_TIMEOUT=90 $P --max_ranks 4 --precision f32" ;;
    f32_8a) echo "CELL_TIMEOUT=200 $P --min_ranks 8 --max_ranks 8 --precision f32 --cells 'gtp8 dp8 tp2gtp2dp2_llama gtp4dp2_llama'" ;;
    f32_8b) echo "CELL_TIMEOUT=300 $P --min_ranks 8 --max_ranks 8 --precision f32 --cells 'tp4gtp2_sp pp2tp2gtp2 tp2gtp2dp2ep4egtp2_moe'" ;;
    bf16_2) echo "BF16_STEPS=$BF16_STEPS_2 CELL_TIMEOUT=150 $P --max_ranks 2 --precision bf16 --cells 'gtp2 tp2 dp2 cp2 dp2ep2_moe pp2vpp2 pp2vpp2_llama cp2_hybrid pp2_hybrid cp2_moe'" ;;
    bf16_4) echo "BF16_STEPS=$BF16_STEPS_4 CELL_TIMEOUT=150 $P --min_ranks 4 --max_ranks 4 --precision bf16 --cells 'gtp4 tp2gtp2 gtp2dp2 tp2dp2 tp2gtp2_sp_llama pp2gtp2 pp4_llama cp2gtp2 gtp2dp2ep2egtp2_moe'" ;;
    fp8) echo "GTP_SET=parallel.gtp_gather_dtype=fp8 CELL_TIMEOUT=90 $P --max_ranks 4 --precision f32 --cells 'gtp2 tp2gtp2 gtp2dp2 gtp2dp2ep2egtp2_moe'" ;;
    fp8_gemm) echo "BF16_STEPS=$BF16_STEPS_2 CELL_TIMEOUT=150 $P --max_ranks 4 --precision fp8 --cells 'gtp2 tp2 dp2 cp2 tp2gtp2 tp2gtp2_sp_llama pp2gtp2'" ;;
    graphs) echo "CELL_TIMEOUT=200 $P --max_ranks 8 --graphs --precision f32" ;;
    graphs_bf16) echo "BF16_STEPS=10 CELL_TIMEOUT=90 $P --max_ranks 4 --graphs --precision bf16 --cells 'gtp2 tp2gtp2 gtp2dp2'" ;;
    mimo) echo "CELL_TIMEOUT=150 bash tools/bench/mimo_parity.sh" ;;
    death) echo "bash tests/reliability/rank_death_test.sh \$B/recipes_gpt_124m_train \$B/tools_gtprun_gtprun --trials 5 --seed 11 --limit 60 --set train.device=cuda,model.n_embd=128,model.n_head=2,model.vocab_size=256,parallel.comm_timeout_s=30" ;;
  esac
}

if ((DRY)); then
  for p in $PARTS; do echo "PART $p: $(part_cmd "$p")"; done
  exit 0
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/gtp_nccl_table.XXXXXX")"
echo "nccl_table: work dir $WORK; parts: $PARTS; $JOBS at a time"
unpack_bundle "$WORK" "$ROOT" || exit 1
export GTP_TRAIN GTPRUN
B="$(dirname "$GTP_TRAIN")"
export VLM="${VLM:-$B/recipes_vlm_mimo_train}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true

# Runs one part in a session of its own (so that the deadline can stop all
# of it: timeout, gtprun and the ranks), in its own directory (TMPDIR; OUT is
# $OUT/table_<part> so that logs come back even when the call is cut).
run_part() {
  local p="$1" dir="$WORK/$1" t0=$SECONDS rc=0 out="$WORK/$1/out"
  [[ -n "${OUT:-}" ]] && out="$OUT/table_$1"  # not deeper: the device tool brings back 3 levels
  mkdir -p "$dir/tmp" "$out"
  setsid bash -c 'cd "$1" && export TMPDIR="$2" OUT="$3" B="$4" && eval "$5"' part "$ROOT" "$dir/tmp" \
    "$out" "$B" "$(part_cmd "$p")" > "$dir/part.log" 2>&1 &
  echo "$!" > "$dir/sid"
  wait "$!" || rc=$?
  [[ -z "${OUT:-}" ]] || cp "$dir/part.log" "$out/" 2>/dev/null || true
  echo "$rc $((SECONDS - t0))" > "$dir/done"
  echo "nccl_table: part $p ended (rc $rc) in $((SECONDS - t0)) s"
}
# Stops every part still running (its whole session) at the deadline.
stop_parts() {
  local p sid
  for p in "${started[@]}"; do
    [[ -f "$WORK/$p/done" || ! -f "$WORK/$p/sid" ]] && continue
    sid="$(cat "$WORK/$p/sid")"
    echo "nccl_table: part $p stopped at the deadline (${SECONDS} s, TABLE_DEADLINE=${TABLE_DEADLINE})" >&2
    echo "$p" >> "$WORK/stopped"
    pkill -TERM -s "$sid" 2>/dev/null || true
  done
  sleep 5
  for p in "${started[@]}"; do
    [[ -f "$WORK/$p/sid" ]] && pkill -KILL -s "$(cat "$WORK/$p/sid")" 2>/dev/null || true
  done
}

started=()
for p in $PARTS; do
  while (($(jobs -rp | wc -l) >= JOBS)) && ((SECONDS < TABLE_DEADLINE)); do sleep 1; done
  if ((SECONDS > TABLE_LIMIT)); then
    echo "nccl_table: part $p not started: ${SECONDS} s used of TABLE_LIMIT=${TABLE_LIMIT}" >&2
    continue
  fi
  echo "nccl_table: part $p started at ${SECONDS} s"
  run_part "$p" &
  started+=("$p")
done
while (($(jobs -rp | wc -l) > 0)) && ((SECONDS < TABLE_DEADLINE)); do sleep 1; done
(($(jobs -rp | wc -l) > 0)) && stop_parts
wait

# One table: every part's rows (parity.py's TSV), death and parts that
# produced no rows as rows of their own.
TSV="$WORK/cells.tsv"
: > "$TSV"
for p in $PARTS; do
  dir="$WORK/$p"
  stopped=""
  grep -qx "$p" "$WORK/stopped" 2>/dev/null && stopped="stopped at TABLE_DEADLINE=${TABLE_DEADLINE} s"
  if [[ ! -f "$dir/sid" ]]; then
    printf '%s\t-\t-\tskip\t-\t-\t-\t-\tnot started within TABLE_LIMIT=%s s\n' "part $p" "$TABLE_LIMIT" >> "$TSV"
    continue
  fi
  rc=stopped took="$SECONDS"
  [[ -f "$dir/done" ]] && read -r rc took < "$dir/done"
  if [[ "$p" == death ]]; then
    summary="$(grep -E '^rank death: [0-9]+ trials, ' "$dir/part.log" | tail -1 || true)"
    status=pass
    [[ "$rc" == 0 && "$summary" == *", 0 failed "* ]] || status=error
    printf '%s\t4\tbf16\t%s\t-\t-\t-\t-\t%s (%s s)\n' "rank death, 1 of 4 SIGKILLed" "$status" \
      "${summary:-no summary line, rc $rc}" "$took" >> "$TSV"
    continue
  fi
  tsv="$(find "$dir/tmp" -maxdepth 2 -name cells.tsv | head -1)"
  [[ -n "$tsv" && -s "$tsv" ]] && sed "s/^/[$p] /" "$tsv" >> "$TSV"
  if [[ -n "$stopped" ]]; then
    printf '%s\t-\t-\terror\t-\t-\t-\t-\t%s; its later cells did not run\n' "part $p" "$stopped" >> "$TSV"
  elif [[ -z "$tsv" || ! -s "$tsv" ]]; then
    printf '%s\t-\t-\terror\t-\t-\t-\t-\tno rows (rc %s): %s\n' "part $p" "$rc" \
      "$({ grep -E 'error|Error' "$dir/part.log" || true; } | tail -1 | tr '\t|' '  ' | cut -c1-160)" >> "$TSV"
  fi
done
[[ -n "${OUT:-}" ]] && mkdir -p "$OUT/nccl_table" && cp "$TSV" "$OUT/nccl_table/"
rc=0
python3 "$ROOT/tools/bench/parity.py" "$TSV" | tee "$WORK/table.md" || rc=$?
[[ -n "${OUT:-}" ]] && cp "$WORK/table.md" "$OUT/nccl_table/"
for p in $PARTS; do
  [[ -f "$WORK/$p/done" ]] && echo "nccl_table: $p $(cut -d' ' -f2 "$WORK/$p/done") s"
done
echo "nccl_table: ${SECONDS} s in all, $JOBS parts at a time"
exit "$rc"
