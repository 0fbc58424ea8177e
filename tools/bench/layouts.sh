# shellcheck shell=bash
# tools/bench/layouts.sh — layout names → trainer overrides, sourced by
# nccl_parity.sh and scaling.sh (bash); and the one-GPU step benchmarks'
# settings and device-script start (fp8_check.sh, ab_steps.sh).
#
#   source tools/bench/layouts.sh
#   layout_parse gtp2dp4 || exit 1
#   echo "$LAYOUT_WORLD $LAYOUT_SET"   # 8 parallel.world_size=8,parallel.tp=1,...
#
# A name is axis sizes written one after another, then options:
#   tpN gtpN dpN ppN vppN cpN epN egtpN   (any order, each at most once, 1 when absent)
#   _sp (sequence parallelism)  _llama  _moe  _hybrid   (model variants, see nccl_parity.sh)
# e.g. "tp2gtp4", "gtp2dp4", "pp2gtp2", "tp2gtp2dp2ep4egtp2_moe", "tp2gtp2_sp_llama".
# World = tp·gtp·dp·pp·cp (experts live on the same ranks: ep·egtp must divide it);
# data lanes = gtp·dp (parallel/process_groups.cc "data": ranks reading
# different samples), so at a fixed micro-batch and global batch a layout
# accumulates global / (micro · lanes) micro-batches.

# Sets LAYOUT_TP LAYOUT_GTP LAYOUT_DP LAYOUT_PP LAYOUT_VPP LAYOUT_CP LAYOUT_EP
# LAYOUT_EGTP LAYOUT_SP (0/1) LAYOUT_MODEL (gpt2|llama|moe|hybrid) LAYOUT_WORLD
# LAYOUT_LANES and LAYOUT_SET (the --set overrides, parallel.* only).
# Returns 1 with a message on stderr for a name it cannot read.
layout_parse() {
  local name="$1" s axes opt
  LAYOUT_TP=1 LAYOUT_GTP=1 LAYOUT_DP=1 LAYOUT_PP=1 LAYOUT_VPP=1 LAYOUT_CP=1 LAYOUT_EP=1 LAYOUT_EGTP=1
  LAYOUT_SP=0 LAYOUT_MODEL=gpt2
  axes="${name%%_*}"
  s="$axes"
  local seen=" "
  while [[ -n "$s" ]]; do
    if [[ "$s" =~ ^(egtp|gtp|tp|dp|pp|vpp|cp|ep)([0-9]+)(.*)$ ]]; then
      local ax="${BASH_REMATCH[1]}" n="${BASH_REMATCH[2]}"
      s="${BASH_REMATCH[3]}"
      if [[ "$seen" == *" $ax "* ]]; then echo "layouts: '$name' names $ax twice" >&2; return 1; fi
      if ((n < 1)); then echo "layouts: '$name': $ax$n" >&2; return 1; fi
      seen+="$ax "
      case "$ax" in
        tp) LAYOUT_TP=$n ;; gtp) LAYOUT_GTP=$n ;; dp) LAYOUT_DP=$n ;; pp) LAYOUT_PP=$n ;;
        vpp) LAYOUT_VPP=$n ;; cp) LAYOUT_CP=$n ;; ep) LAYOUT_EP=$n ;; egtp) LAYOUT_EGTP=$n ;;
      esac
    else
      echo "layouts: cannot read '$name' at '$s' (axes tpN gtpN dpN ppN vppN cpN epN egtpN, options _sp _llama _moe _hybrid)" >&2
      return 1
    fi
  done
  if [[ "$name" == *_* ]]; then
    local rest="${name#*_}"
    local IFS=_
    for opt in $rest; do
      case "$opt" in
        sp) LAYOUT_SP=1 ;;
        llama|moe|hybrid) LAYOUT_MODEL="$opt" ;;
        *) echo "layouts: '$name': unknown option '_$opt' (_sp _llama _moe _hybrid)" >&2; return 1 ;;
      esac
    done
  fi
  LAYOUT_WORLD=$((LAYOUT_TP * LAYOUT_GTP * LAYOUT_DP * LAYOUT_PP * LAYOUT_CP))
  LAYOUT_LANES=$((LAYOUT_GTP * LAYOUT_DP))
  if (( LAYOUT_EP > 1 || LAYOUT_EGTP > 1 )) && [[ "$LAYOUT_MODEL" != moe ]]; then
    echo "layouts: '$name': ep/egtp need the _moe model" >&2; return 1
  fi
  if ((LAYOUT_WORLD % (LAYOUT_EP * LAYOUT_EGTP) != 0)); then
    echo "layouts: '$name': ep·egtp = $((LAYOUT_EP * LAYOUT_EGTP)) does not divide the world $LAYOUT_WORLD" >&2; return 1
  fi
  LAYOUT_SET="parallel.world_size=$LAYOUT_WORLD,parallel.tp=$LAYOUT_TP"
  LAYOUT_SET+=",parallel.tp_num_weight_shards=$((LAYOUT_TP * LAYOUT_GTP))"
  ((LAYOUT_PP > 1)) && LAYOUT_SET+=",parallel.pp=$LAYOUT_PP"
  ((LAYOUT_VPP > 1)) && LAYOUT_SET+=",parallel.vpp=$LAYOUT_VPP"
  ((LAYOUT_CP > 1)) && LAYOUT_SET+=",parallel.cp=$LAYOUT_CP"
  ((LAYOUT_EP > 1)) && LAYOUT_SET+=",parallel.ep=$LAYOUT_EP"
  ((LAYOUT_EGTP > 1)) && LAYOUT_SET+=",parallel.expert_tp_num_weight_shards=$LAYOUT_EGTP"
  ((LAYOUT_SP)) && LAYOUT_SET+=",parallel.sequence_parallel=true"
  return 0
}

# "TP2·GTP4" style label of the parsed layout (axes of size > 1; "1 rank" when none).
layout_label() {
  local out="" ax v
  for ax in TP GTP DP PP VPP CP EP EGTP; do
    v="LAYOUT_$ax"
    if ((${!v} > 1)); then out+="${out:+·}$ax${!v}"; fi
  done
  ((LAYOUT_SP)) && out+=" SP"
  [[ "$LAYOUT_MODEL" != gpt2 ]] && out+=" ($LAYOUT_MODEL)"
  printf '%s' "${out:-1 rank}"
}

# The one-GPU step benchmarks' common settings (fp8_check.sh, ab_steps.sh):
# B = 8, T = 1024, vocab 50257, the corpus data, a loss line every step, no
# evaluation and no checkpoint (a 1.3B run's final save, 16 GiB with the
# optimizer state, took minutes on disk), on $1 (default cuda).
bench_base() {
  printf '%s' "model.vocab_size=50257,model.seq_len=1024,train.micro_batch=8,train.global_batch=8,data.source=corpus,train.log_every=1,train.eval_every=0,train.device=${1:-cuda},checkpoint.every=0,checkpoint.disable=true,checkpoint.no_resume=true"
}

# bench_case <case> [gpt3|recipe]: the model of one of those benchmarks'
# cases in CASE_SET (settings) and CASE_SHORT (1 for the hybrid and MoE
# cases, which run SHORT_STEPS): g124 (GPT-2 124M), g350 (24 L, C = 1024,
# 16 heads), g1p3 (24 L, C = 2048, 16 heads), hybrid (M*- × 6, width 768),
# moe (every MLP 8 experts of 1536, top-2) and moeb (the same with
# recipes/moe_gpu's Switch aux loss 0.01 and z-loss 0.001). Rates gpt3
# (default) give 350M 3e-4 and 1.3B 2e-4 (min 10 %) as GPT-3's table; recipe
# keeps the recipe's 6e-4. Returns 1, naming the cases, for another name.
bench_case() {
  local lr350=",optim.lr=3e-4,optim.min_lr=3e-5" lr1p3=",optim.lr=2e-4,optim.min_lr=2e-5"
  case "${2:-gpt3}" in
    gpt3) ;;
    recipe) lr350=""; lr1p3="" ;;
    *) echo "bench_case: rates $2 (gpt3 or recipe)" >&2; return 1 ;;
  esac
  local moe="model.moe.num_experts=8,model.moe.ffn_hidden=1536,model.moe.top_k=2"
  CASE_SHORT=0
  case "$1" in
    g124) CASE_SET="" ;;
    g350) CASE_SET="model.n_layer=24,model.n_embd=1024,model.n_head=16$lr350" ;;
    g1p3) CASE_SET="model.n_layer=24,model.n_embd=2048,model.n_head=16$lr1p3" ;;
    hybrid) CASE_SET="model.layer_pattern=M*-M*-M*-M*-M*-M*-,model.n_layer=18"; CASE_SHORT=1 ;;
    moe) CASE_SET="$moe"; CASE_SHORT=1 ;;
    moeb) CASE_SET="$moe,model.moe.aux_loss_coeff=0.01,model.moe.z_loss_coeff=0.001"; CASE_SHORT=1 ;;
    *) echo "unknown case $1 (g124 g350 g1p3 hybrid moe moeb)" >&2; return 1 ;;
  esac
}

# bench_train <bundle dir> <name> <settings>: one run of the bundle's
# recipes_gpt_124m_train (its lib folder first on the library path) on
# gpt_124m.pbtxt with those --set settings, at most RUN_TIMEOUT seconds
# (default 400); its log in $LOG/<name>.log and its metrics in
# $LOG/<name>.jsonl. On failure prints FAIL with how many steps its metrics
# logged and the log's tail, returns 1. The run directory is $LOG/<name>.run
# while it trains, so a run stopped by the device call's limit (this function
# never returning) still leaves its metrics so far in $LOG, which comes back.
bench_train() {
  local b="$1" name="$2" dir rc=0
  dir="$LOG/$name.run"
  rm -rf "$dir" && mkdir -p "$dir"  # a run directory belongs to one run
  LD_LIBRARY_PATH="$b/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" \
    timeout "${RUN_TIMEOUT:-400}" "$b/bin/recipes_gpt_124m_train" \
    --config recipes/gpt_124m/gpt_124m.pbtxt --noprogress --run_dir "$dir" --set "$3" \
    > "$LOG/$name.log" 2>&1 || rc=$?
  if ((rc == 0)); then
    cp "$dir/metrics.jsonl" "$LOG/$name.jsonl" || rc=1
    rm -rf "$dir"
  else
    echo "FAIL $name (rc $rc; metrics so far in $dir: $(cat "$dir/metrics.jsonl" 2>/dev/null | grep -c '"loss"' || true) steps)"
    tail -15 "$LOG/$name.log"
  fi
  return $((rc != 0))
}

# Number of GPUs on this machine (0 without nvidia-smi or a driver).
count_gpus() {
  local n
  n="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)"
  echo "${n:-0}"
}

# The start of a device script: its logs in $OUT/<name> (the device tool)
# or a temp dir (LOG), and the carried bundle's binaries — never a
# GTP_TRAIN / GTPRUN from the environment — unpacked under WORK, at B.
#   bench_start fp8_check "$ROOT" || exit 2
bench_start() {
  local name="$1" root="$2"
  LOG="${OUT:+$OUT/$name}"
  LOG="${LOG:-$(mktemp -d)}"
  mkdir -p "$LOG"
  WORK="$(mktemp -d)"
  unset GTP_TRAIN GTPRUN
  unpack_bundle "$WORK" "$root" || return 2
  B="$WORK/bundle"
}

# Runs the bundled GPU test binary $1 (from $B, its log in $LOG, at most $2
# seconds, default 300) and prints PASS with its counts, SKIPPED when every
# test skipped (a binary that ran nothing has not passed), MISSING, or FAIL
# with its failure lines; returns 1 unless it passed.
run_gpu_test() {
  local t="$1" limit="${2:-300}" ok skipped
  if [[ ! -x "$B/bin/$t" ]]; then
    echo "MISSING $t (not in the bundle)"
    return 1
  fi
  if (cd "$B" && timeout "$limit" "./bin/$t" > "$LOG/$t.log" 2>&1); then
    ok="$(grep -c '^\[       OK' "$LOG/$t.log")"
    skipped="$(grep -c '^\[  SKIPPED' "$LOG/$t.log")"
    if ((ok == 0)); then
      echo "SKIPPED $t (all $skipped skipped: $(grep -m1 -o 'no GPU.*\|GPU.*' "$LOG/$t.log" | head -1))"
      return 1
    fi
    echo "PASS $t ($ok ok, $skipped skipped)"
    return 0
  fi
  echo "FAIL $t"
  grep -E 'Failure|FAILED|error|probe|layout|Expected|Which|declines' "$LOG/$t.log" | head -40
  return 1
}

# Unpacks the bundle (tools/gpu.sh bundle) into $1 unless GTP_TRAIN and
# GTPRUN are set, and sets GTP_TRAIN, GTPRUN, LD_LIBRARY_PATH the way
# `tools/gpu.sh run` does. Returns 1 with a message when a binary is missing.
unpack_bundle() {
  local work="$1" root="$2"
  if [[ -z "${GTP_TRAIN:-}" || -z "${GTPRUN:-}" ]]; then
    local tar="${GTP_BUNDLE_DIR:-$root/.bundle}/bundle.tar.xz"
    [[ -f "$tar" ]] || { echo "no $tar (run tools/gpu.sh bundle here and carry .bundle)" >&2; return 1; }
    mkdir -p "$work/bundle"
    tar -C "$work/bundle" -xJf "$tar"
    export LD_LIBRARY_PATH="$work/bundle/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
    export NCCL_NVLS_ENABLE=0
    export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-8}"
  fi
  GTP_TRAIN="${GTP_TRAIN:-$work/bundle/bin/recipes_gpt_124m_train}"
  GTPRUN="${GTPRUN:-$work/bundle/bin/tools_gtprun_gtprun}"
  local b
  [[ -x "$GTP_TRAIN" ]] || { echo "no binary $GTP_TRAIN: bundle //recipes/gpt_124m:train (tools/gpu.sh bundle's default set has it)" >&2; return 1; }
  [[ -x "$GTPRUN" ]] || { echo "no binary $GTPRUN: bundle //tools/gtprun:gtprun (tools/gpu.sh bundle's default set has it)" >&2; return 1; }
}
