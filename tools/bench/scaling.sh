#!/usr/bin/env bash
# tools/bench/scaling.sh — gtp's layouts on several GPUs beside PyTorch FSDP2
# (issue 20; tools/bench/two_gpu.sh is its two-GPU form, issue 19). On the GPU
# machine, from the repository root, after `tools/gpu.sh bundle` here:
#
#   run(command="bash tools/bench/scaling.sh --models 350m", carry=[".bundle"], kind="nvidia-h200-x8")
#   run(command="bash tools/bench/scaling.sh --models 1.3b --weak ''", carry=[".bundle"], kind="nvidia-h200-x8")
#   bash tools/bench/scaling.sh 8 --dry_run          the selection and the commands; nothing run
#
# Usage: scaling.sh [N] [--dry_run] [--models "350m 1.3b"] [--layouts "SPEC..."]
#                   [--weak "SPEC"] [--torch "fsdp2 ddp"] [--degrade] [--ref LABEL]
#                   [--check KIND:A/B>=X]...
#   N           GPUs (default: all nvidia-smi lists)
#   --models    350m (24L, C=1024, 16 heads) and/or 1.3b (24L, C=2048, 16 heads); GPT-2
#               vocabulary 50257, T=1024
#   --layouts   tools/bench/layouts.sh names; default issue 20's DP8, GTP2·DP4,
#               GTP4·DP2, GTP8, TP2·GTP4 and, with fewer than 8 GPUs, the same
#               family on N (DP N, GTP2·DP N/2, GTP4·DP N/4, GTP N, TP2·GTP N/2)
#   --weak      weak scaling of this layout (no dp) at 2, 4, 8 GPUs, DP added:
#               GTP2, GTP2·DP2, GTP2·DP4 for "gtp2" (the default); one
#               micro-batch per data lane (global batch MICRO × lanes); first
#               model only; runs beyond N are SKIP rows; '' for none
#   --torch     torch_dist.py modes at N GPUs (default fsdp2; '' for none)
#   --degrade   a layout needing more GPUs than N runs on 1 GPU instead (row
#               says so) — for smoke-testing on a small machine; else SKIP
#   --ref, --check   passed to tools/bench/dist_table.py (the ratio column and the
#               MET / NOT MET lines); default ref: the first layout that ran
# Every run: bf16 (PRECISION), STEPS=30 steps, medians over the steps after
# SKIP=10, micro-batch MICRO=8 per data lane, the same global batch GLOBAL
# (default MICRO × N) for every layout and torch run of a model (a layout of
# L data lanes accumulates GLOBAL / (MICRO · L) micro-batches; one where that
# is no whole number is a SKIP row); DATA=corpus; gtp as `gtprun --nproc W`
# (NCCL; W = 1 too: an NCCL world of one), its final checkpoint deleted
# after the run (disk); PyTorch as `python3 -m torch.distributed.run`.
# Other settings: PEAK_TFLOPS=989 GTP_SET (extra gtp --set) RUN_TIMEOUT=300 (s, per run)
# TORCH_ARGS (extra torch_dist.py flags) GTP_TRAIN GTPRUN PYTHON; for the
# CPU smoke test (tools/bench/multi_gpu_test.sh) DEVICE=cpu (UCX processes),
# --models tiny (2L, C=64, 4 heads) and VOCAB, SEQ.
# Prints the table (tools/bench/dist_table.py); logs, metrics and the table
# under a fresh temp dir (printed), copied to $OUT/<name> (name: scaling, or
# BENCH_NAME) when OUT is set. Exits 0 unless the setup fails (a failed run is
# a row saying so).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
source "$ROOT/tools/bench/layouts.sh"

N="" DRY=0 MODELS="350m 1.3b" LAYOUTS="" WEAK="gtp2" TORCH="fsdp2" DEGRADE=0 REF="" CHECKS=()
usage() { sed -n '/^# Usage:/,/^#               MET/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while (($#)); do
  case "$1" in
    --dry_run) DRY=1 ;;
    --degrade) DEGRADE=1 ;;
    --models) shift; MODELS="${1:-}" ;;
    --layouts) shift; LAYOUTS="${1:-}" ;;
    --weak) shift; WEAK="${1:-}" ;;
    --torch) shift; TORCH="${1:-}" ;;
    --ref) shift; REF="${1:-}" ;;
    --check) shift; CHECKS+=(--check "${1:-}") ;;
    -h|--help) usage ;;
    *) [[ "$1" =~ ^[0-9]+$ && -z "$N" ]] || { echo "scaling: unexpected argument '$1'" >&2; usage; }; N="$1" ;;
  esac
  shift
done
[[ -n "$N" ]] || N="$(count_gpus)"
((N >= 1)) || { echo "scaling: no GPU found (give N for a dry run)" >&2; exit 2; }
for m in $MODELS; do [[ "$m" =~ ^(350m|1\.3b|tiny)$ ]] || { echo "scaling: unknown model '$m' (350m, 1.3b)" >&2; exit 2; }; done
for t in $TORCH; do [[ "$t" == fsdp2 || "$t" == ddp ]] || { echo "scaling: unknown torch mode '$t' (fsdp2, ddp)" >&2; exit 2; }; done

STEPS="${STEPS:-30}" SKIP="${SKIP:-10}" MICRO="${MICRO:-8}" GLOBAL="${GLOBAL:-$((MICRO * N))}"
PRECISION="${PRECISION:-bf16}" DATA="${DATA:-corpus}" PEAK_TFLOPS="${PEAK_TFLOPS:-989}"
GTP_SET="${GTP_SET:-}" RUN_TIMEOUT="${RUN_TIMEOUT:-300}" TORCH_ARGS="${TORCH_ARGS:-}" PYTHON="${PYTHON:-python3}"
VOCAB="${VOCAB:-50257}" SEQ="${SEQ:-1024}" DEVICE="${DEVICE:-cuda}"
BENCH_NAME="${BENCH_NAME:-scaling}"

# Issue 20's family of layouts on n GPUs (n a power of two), deduplicated.
family() {
  local n="$1" out="" s
  for s in "dp$n" "gtp2dp$((n / 2))" "gtp4dp$((n / 4))" "gtp$n" "tp2gtp$((n / 2))"; do
    s="${s%dp1}"; s="${s%gtp1}"
    [[ "$s" =~ (dp|gtp)0$ || "$s" == tp2 ]] && continue  # too few GPUs for it
    [[ " $out " == *" $s "* ]] || out+="${out:+ }$s"
  done
  printf '%s' "$out"
}
if [[ -z "$LAYOUTS" ]]; then
  LAYOUTS="dp8 gtp2dp4 gtp4dp2 gtp8 tp2gtp4"
  if ((N < 8 && N >= 2)); then
    for s in $(family "$N"); do [[ " $LAYOUTS " == *" $s "* ]] || LAYOUTS+=" $s"; done
  fi
fi
for s in $LAYOUTS $WEAK; do layout_parse "$s" > /dev/null || exit 2; done

if ((DRY)); then
  WORK="${TMPDIR:-/tmp}/gtp_$BENCH_NAME.DRYRUN"
  GTP_TRAIN="${GTP_TRAIN:-recipes_gpt_124m_train}" GTPRUN="${GTPRUN:-tools_gtprun_gtprun}"
  echo "$BENCH_NAME: dry run, N=$N, models: $MODELS, layouts: $LAYOUTS, weak: ${WEAK:-none}, torch: ${TORCH:-none}"
else
  WORK="$(mktemp -d "${TMPDIR:-/tmp}/gtp_$BENCH_NAME.XXXXXX")"
  echo "$BENCH_NAME: work dir $WORK, N=$N, models: $MODELS, layouts: $LAYOUTS, weak: ${WEAK:-none}, torch: ${TORCH:-none}"
  unpack_bundle "$WORK" "$ROOT" || exit 1
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true
fi
CONFIG="$ROOT/recipes/gpt_124m/gpt_124m.pbtxt"
TSV="$WORK/runs.tsv"
((DRY)) || : > "$TSV"

model_shape() {  # 350m | 1.3b → "L C NH"
  case "$1" in 350m) echo "24 1024 16" ;; 1.3b) echo "24 2048 16" ;; tiny) echo "2 64 4" ;; esac
}
row() {  # section kind label gpus global L C file log note
  ((DRY)) && return 0
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "$6" "$7" "$VOCAB" "$SEQ" "$8" "$9" "${10}" >> "$TSV"
}
run_cmd() {  # log, command...
  local log="$1"; shift
  if ((DRY)); then echo "RUN $*"; return 0; fi
  echo "$BENCH_NAME: $*" > "$log"
  timeout -k 10 "$RUN_TIMEOUT" "$@" >> "$log" 2>&1
}
fail_note() {  # log, rc
  local why
  why="$(grep -E 'error|Error|out of memory|failed' "$1" 2>/dev/null | tail -1 | tr '\t|' '  ' | cut -c1-140)"
  printf 'failed (rc %s%s)%s' "$2" "$( (($2 == 124)) && echo ", timed out after ${RUN_TIMEOUT}s")" "${why:+: $why}"
}

# One gtp run: section, spec, label, global batch, model.
gtp_run() {
  local sec="$1" spec="$2" label="$3" gb="$4" model="$5" L C NH
  read -r L C NH <<< "$(model_shape "$model")"
  layout_parse "$spec"
  local world="$LAYOUT_WORLD" lanes="$LAYOUT_LANES" set="$LAYOUT_SET" note=""
  if ((world > N)); then
    if ((DEGRADE)); then
      note="degraded: needs $world GPUs, ran on 1"
      world=1 lanes=1 set="parallel.world_size=1,parallel.tp=1,parallel.tp_num_weight_shards=1"
    else
      ((DRY)) && echo "SKIP $sec $label: needs $world GPUs, $N found"
      row "$sec" skip "$label" "$world" "$gb" "$L" "$C" - - "needs $world GPUs, $N found"
      return 0
    fi
  fi
  if ((gb % (MICRO * lanes) != 0)); then
    ((DRY)) && echo "SKIP $sec $label: global batch $gb is not a multiple of micro-batch $MICRO x $lanes lanes"
    row "$sec" skip "$label" "$world" "$gb" "$L" "$C" - - "global batch $gb is not a multiple of $MICRO x $lanes lanes"
    return 0
  fi
  local dir="$WORK/$sec/gtp_$spec"
  ((DRY)) && echo "# $sec $label: gtp on $world GPUs${note:+ ($note)}"
  mkdir -p "$WORK/$sec"
  local s="model.vocab_size=$VOCAB,model.seq_len=$SEQ,model.n_layer=$L,model.n_embd=$C,model.n_head=$NH"
  s+=",data.source=$DATA,train.steps=$STEPS,train.micro_batch=$MICRO,train.global_batch=$gb"
  s+=",train.log_every=10,train.eval_every=0,train.device=$DEVICE,train.precision=$PRECISION"
  s+=",train.peak_tflops=$PEAK_TFLOPS,checkpoint.every=0,checkpoint.no_resume=true,$set${GTP_SET:+,$GTP_SET}"
  local rc=0
  run_cmd "$dir.log" "$GTPRUN" --nproc "$world" -- "$GTP_TRAIN" --config "$CONFIG" --noprogress --run_dir "$dir" --set "$s" || rc=$?
  ((DRY)) && return 0
  rm -rf "$dir/checkpoints"  # the final save: GBs per run, not needed
  if ((rc != 0)); then
    echo "$BENCH_NAME: $sec $label failed (log $dir.log)" >&2; tail -5 "$dir.log" >&2 || true
    note="${note:+$note; }$(fail_note "$dir.log" "$rc")"
    row "$sec" skip "$label" "$world" "$gb" "$L" "$C" - - "$note"
  else
    row "$sec" gtp "$label" "$world" "$gb" "$L" "$C" "$dir/metrics.jsonl" "$dir.log" "$note"
  fi
}

# One torch_dist.py run: section, mode, global batch, model.
torch_run() {
  local sec="$1" mode="$2" gb="$3" model="$4" L C NH
  read -r L C NH <<< "$(model_shape "$model")"
  local label world="$N" note=""
  label="${mode^^}"
  if ((gb % (MICRO * world) != 0)); then
    row "$sec" skip "$label" "$world" "$gb" "$L" "$C" - - "global batch $gb is not a multiple of $MICRO x $world ranks"
    return 0
  fi
  local out="$WORK/$sec/torch_$mode"
  ((DRY)) && echo "# $sec $label: torch on $world GPUs"
  mkdir -p "$WORK/$sec"
  local rc=0
  # shellcheck disable=SC2086  # TORCH_ARGS is a list of flags
  run_cmd "$out.log" "$PYTHON" -m torch.distributed.run --standalone --nproc_per_node "$world" \
    "$ROOT/tools/bench/torch_dist.py" --mode "$mode" --n_layer "$L" --n_embd "$C" --n_head "$NH" \
    --vocab "$VOCAB" --seq_len "$SEQ" --micro_batch "$MICRO" --global_batch "$gb" --steps "$STEPS" \
    --skip "$SKIP" --peak_tflops "$PEAK_TFLOPS" --json "$out.json" $TORCH_ARGS || rc=$?
  ((DRY)) && return 0
  if ((rc != 0)) || [[ ! -s "$out.json" ]]; then
    echo "$BENCH_NAME: $sec torch $mode failed (log $out.log)" >&2; tail -5 "$out.log" >&2 || true
    row "$sec" skip "$label" "$world" "$gb" "$L" "$C" - - "$(fail_note "$out.log" "$rc")"
  else
    grep -q '"compiled": true' "$out.json" && note="torch.compile"
    row "$sec" torch "$label" "$world" "$gb" "$L" "$C" "$out.json" "$out.log" "$note"
  fi
}

first_model=1
for model in $MODELS; do
  sec="$model"
  for spec in $LAYOUTS; do
    layout_parse "$spec"
    gtp_run "$sec" "$spec" "$(layout_label)" "$GLOBAL" "$model"
  done
  for mode in $TORCH; do torch_run "$sec" "$mode" "$GLOBAL" "$model"; done
  if ((first_model)) && [[ -n "$WEAK" ]]; then
    layout_parse "$WEAK"
    base_world="$LAYOUT_WORLD"
    ((LAYOUT_DP == 1)) || { echo "scaling: --weak '$WEAK' must not name dp (the series adds it)" >&2; exit 2; }
    for n in 2 4 8; do
      ((n >= base_world && n % base_world == 0)) || continue
      spec="$WEAK"
      ((n > base_world)) && spec+="dp$((n / base_world))"
      layout_parse "$spec"
      # Weak scaling: one micro-batch per data lane, the global batch grows with the GPUs.
      gtp_run "weak-$model" "$spec" "$(layout_label)" "$((MICRO * LAYOUT_LANES))" "$model"
    done
  fi
  first_model=0
done
((DRY)) && exit 0

ref="$REF"
if [[ -z "$ref" ]]; then layout_parse "${LAYOUTS%% *}"; ref="$(layout_label)"; fi
"$PYTHON" "$ROOT/tools/bench/dist_table.py" "$TSV" --ref "$ref" --skip "$SKIP" --peak_tflops "$PEAK_TFLOPS" \
  --weak_target 0.93 "${CHECKS[@]}" | tee "$WORK/table.md"
echo "$BENCH_NAME: $N GPUs, $PRECISION, $STEPS steps (medians after $SKIP), micro-batch $MICRO, global batch $GLOBAL, data $DATA"
if [[ -n "${OUT:-}" ]]; then
  mkdir -p "$OUT/$BENCH_NAME"
  cp "$WORK/table.md" "$TSV" "$OUT/$BENCH_NAME/"
  (cd "$WORK" && find . \( -name '*.log' -o -name '*.json' -o -name metrics.jsonl \) | tar -czf "$OUT/$BENCH_NAME/logs.tar.gz" -T -)
  echo "$BENCH_NAME: table and logs in \$OUT/$BENCH_NAME"
fi
