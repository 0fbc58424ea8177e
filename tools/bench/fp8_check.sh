#!/usr/bin/env bash
# tools/bench/fp8_check.sh — train.precision=fp8 against bf16 in one device
# call: the same model, weights (seed) and batches, STEPS steps each, on one
# GPU (issue 31's fp8 rows).
#
#   (here)        tools/gpu.sh bundle
#   (device tool) run(command="bash tools/bench/fp8_check.sh", carry=[".bundle"])
#
# Cases (B=8, T=1024, vocab 50257, the corpus data): GPT-2 124M (12 L,
# C=768), 350M (24 L, C=1024, 16 heads), 1.3B (24 L, C=2048, 16 heads), the
# hybrid (`M*-` × 6, width 768) and the MoE shape (124M, every MLP 8 experts
# of 1536, top-2; its experts in fp8 under fp8 since
# layers/moe:experts_fp8_gpu_test passed on the H200; no balancing loss, so
# on this corpus the router sends nearly every token to one expert) and moeb
# (the same with recipes/moe_gpu's Switch aux loss 0.01 and z-loss 0.001:
# the experts' rows spread, smaller grouped GEMMs). CASES picks some
# (default: all but moeb); STEPS (default 300) and SHORT_STEPS (hybrid and
# the MoE cases, 60).
# Per case it prints, for bf16 and fp8: median ms/step over steps 11..N,
# tokens/s, MFU (on the bf16 peak, 989 TFLOP/s, whatever the precision),
# peak memory; then fp8/bf16's speed ratio and the losses' agreement (mean
# |Δloss| over all steps, the final step's relative difference, the mean
# of the last 10 steps', and the mean |Δloss| past the warm-up, steps 11..N,
# where the loss no longer falls steeply); TREND=1 also each run's median ms/step over the
# windows 2-10, 11-30, 31-60, 61-90, 91-120, 121-200, 201-300 (whether a
# run settles, e.g. as per-shape algorithm caches fill). PROFILE=1 adds, after the cases, where the 124M
# fp8 step's kernel time goes (tools/bench/kernel_profile.py; needs ncu);
# GEMMS=1 the linears' GEMMs alone, bf16 vs fp8 with and without the
# quantisation (core/kernels/bench:fp8_linear_benchmark, about two minutes;
# GEMM_FILTER picks its benchmarks, e.g. 'Fp8GemmAlgo/124m.*/wgrad' for
# every algorithm cuBLASLt offers the 124M wgrad GEMMs); QUANT=1 the
# quantisers alone (core/kernels/bench:fp8_quant_benchmark, GB/s beside a
# device copy; QUANT_OLD=<another build of it> runs that one first, for a
# before/after in the same call).
# VARIANTS (default fp8) lists the fp8 runs beside each case's bf16 run:
# fp8 (all three GEMMs), fp8w (train.fp8_wgrad=bf16: the wgrad GEMMs
# unquantised), fp8g and fp8gw (the same two with train.fp8_gemm=wgmma: gtp's
# own FP8 GEMM kernel instead of cuBLASLt's), fp8fl (the first and the last
# layer in bf16: train.fp8_bf16_first_layers=1, _last_layers=1, as
# Megatron-LM's --first-last-layers-bf16), and bf16m (bf16 again, in
# two micro-batches of 4: the same model, data and global batch, other
# summation orders — its distance from the bf16 run is the loss
# comparison's noise floor, to read the fp8 rows against); FP8_EXTRA adds
# settings to every fp8 run; EXTRA to every run of a case, bf16 and each variant
# alike (e.g. EXTRA=optim.warmup_steps=30: the same comparison under another
# schedule).
# RATES (default gpt3) sets the peak learning rate by size as GPT-3's table
# does (Brown et al. 2020, table 2.1): 350M 3e-4, 1.3B 2e-4, min 10 % of it;
# 124M and the hybrid/MoE shapes keep the recipe's 6e-4. RATES=recipe runs
# every case at the recipe's 6e-4, which makes the larger models overshoot at
# the end of warm-up (a loss spike at step 11 in bf16 as in fp8, reversed at
# step 12: the twenty-eighth session's note in docs/PERFORMANCE.md).
# Logs and metrics in $OUT/fp8_check (device tool) or a temp dir. Exit 1
# when a run failed.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
source "$ROOT/tools/bench/layouts.sh"  # bench_start, bench_base, bench_case, bench_train
bench_start fp8_check "$ROOT" || exit 2  # LOG, WORK, B
STEPS="${STEPS:-300}"
SHORT_STEPS="${SHORT_STEPS:-60}"
CASES="${CASES:-g124 g350 g1p3 hybrid moe}"
RATES="${RATES:-gpt3}"
case "$RATES" in
  gpt3|recipe) ;;
  *) echo "fp8_check: RATES=$RATES (gpt3 or recipe)" >&2; exit 2 ;;
esac
status=0
BASE="$(bench_base cuda)"

run() {  # case label precision steps extra-settings (logs as <case>_<label>)
  bench_train "$B" "$1_$2" "$BASE,train.precision=$3,train.steps=$4${5:+,$5}" || status=1
}

for c in $CASES; do
  bench_case "$c" "$RATES" || { echo "fp8_check: unknown case $c" >&2; exit 2; }
  extra="$CASE_SET${EXTRA:+${CASE_SET:+,}$EXTRA}"
  steps=$STEPS
  if ((CASE_SHORT)); then steps=$SHORT_STEPS; fi
  echo "=== $c ($steps steps)"
  run "$c" bf16 bf16 "$steps" "$extra"
  for v in ${VARIANTS:-fp8}; do
    vp=fp8
    case "$v" in
      fp8) vx="" ;;
      fp8w) vx="train.fp8_wgrad=bf16" ;;
      fp8g) vx="train.fp8_gemm=wgmma" ;;
      fp8gw) vx="train.fp8_gemm=wgmma,train.fp8_wgrad=bf16" ;;
      fp8fl) vx="train.fp8_bf16_first_layers=1,train.fp8_bf16_last_layers=1" ;;
      bf16m) vx="train.micro_batch=4"; vp=bf16 ;;  # overrides BASE's 8 (the last setting wins)
      *) echo "fp8_check: unknown variant $v (fp8 fp8w fp8g fp8gw fp8fl bf16m)" >&2; exit 2 ;;
    esac
    [[ $vp == fp8 ]] && vx="$vx${FP8_EXTRA:+${vx:+,}$FP8_EXTRA}"
    run "$c" "$v" "$vp" "$steps" "$extra${vx:+${extra:+,}$vx}"
    grep -m1 "fp8 GEMMs" "$LOG/${c}_$v.log" | sed 's/^/  banner: /' | cut -c1-200
    /usr/bin/env python3 - "$LOG/${c}_bf16.jsonl" "$LOG/${c}_$v.jsonl" "$v" <<'PY'
import json, os, statistics, sys
runs = {}
variant = sys.argv[3]
for p in sys.argv[1:3]:
    if not os.path.exists(p):
        print(f"  {os.path.basename(p)}: missing"); continue
    rows = [r for r in map(json.loads, open(p)) if "loss" in r]
    runs[p] = rows
    t = [r for r in rows if r["step"] > 10]
    ms = statistics.median(r["ms"] for r in t)
    tok = statistics.median(r["tokens_per_s"] for r in t)
    mfu = statistics.median(r.get("mfu", 0) for r in t)
    peak = max(r["peak_mem_bytes"] for r in rows) / 2**30
    tag = "bf16" if p.endswith("_bf16.jsonl") else variant
    print(f"  {tag}: {ms:8.2f} ms/step  {tok:9.0f} tok/s  MFU {100*mfu:5.1f} %  peak {peak:6.2f} GiB  final loss {rows[-1]['loss']:.4f}")
if len(runs) == 2:
    a, b = runs.values()
    ma = statistics.median(r["ms"] for r in a if r["step"] > 10)
    mb = statistics.median(r["ms"] for r in b if r["step"] > 10)
    la = {r["step"]: r["loss"] for r in a}; lb = {r["step"]: r["loss"] for r in b}
    steps = sorted(s for s in la if s in lb)
    d = [abs(la[s] - lb[s]) for s in steps]
    d11 = [abs(la[s] - lb[s]) for s in steps if s > 10]
    last10 = steps[-10:]
    fa = statistics.mean(la[s] for s in last10); fb = statistics.mean(lb[s] for s in last10)
    print(f"  {variant} / bf16 speed {ma/mb:.3f}x;  losses over {len(steps)} steps: mean |d| {statistics.mean(d):.4f}, "
          f"max |d| {max(d):.4f}, final step rel {abs(lb[steps[-1]]-la[steps[-1]])/la[steps[-1]]*100:.2f} %, "
          f"last-10 mean rel {abs(fb-fa)/fa*100:.2f} %"
          + (f", mean |d| past the warm-up (steps 11-{steps[-1]}) {statistics.mean(d11):.4f}" if d11 else ""))
if os.environ.get("TREND") == "1":  # ms/step by windows of steps: flat, or settling as caches fill
    for p, rows in runs.items():
        tag = "bf16" if p.endswith("_bf16.jsonl") else variant
        last = rows[-1]["step"]
        edges = [2, 11, 31, 61, 91, 121, 201, 301]
        wins = [(a, min(b - 1, last)) for a, b in zip(edges, edges[1:]) if a <= last]
        meds = [statistics.median(r["ms"] for r in rows if lo <= r["step"] <= hi) for lo, hi in wins]
        print(f"  {tag} ms/step by steps: " + "  ".join(f"{lo}-{hi} {m:.2f}" for (lo, hi), m in zip(wins, meds)))
PY
  done
done
if [[ "${GEMMS:-0}" == 1 ]]; then
  echo "=== a linear's GEMMs, N = 8192 tokens (ms per call)"
  timeout 240 "$B/bin/core_kernels_bench_fp8_linear_benchmark" \
    --benchmark_filter="${GEMM_FILTER:-BM_Fp8Linear/}" 2>&1 | grep '^BM_' | cut -c1-220
fi
if [[ "${QUANT:-0}" == 1 ]]; then
  echo "=== the quantisers alone, x [8192, C] bf16 (time per call, GB/s)"
  for bin in ${QUANT_OLD:+"$QUANT_OLD"} "$B/bin/core_kernels_bench_fp8_quant_benchmark"; do
    echo "--- $bin"
    timeout 120 "$bin" 2>&1 | grep '^BM_' | sed 's|/min_time:[0-9.]*/manual_time||' |
      awk '{print $1, $2, $3, $NF}'
  done
fi
if [[ "${PROFILE:-0}" == 1 ]]; then
  echo "=== kernel time of the 124M fp8 step"
  timeout 240 python3 tools/bench/kernel_profile.py --bin "$B/bin" --steps 4 --skip_steps 2 \
    --top 25 --set train.precision=fp8 2>&1 | tail -28
fi
rm -rf "$WORK"
exit $status
