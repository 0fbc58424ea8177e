#!/usr/bin/env bash
# tools/bench/wgmma_check.sh — gtp's own block-scaled FP8 GEMM
# (Fp8GemmEngine::kWgmma, core/kernels/fp8/wgmma_gemm.cu) on the GPU in one
# device call (about 6 minutes with STEPS=0, 10 with the training runs):
#
#   (here)        tools/gpu.sh bundle
#   (device tool) run(command="bash tools/bench/wgmma_check.sh", carry=[".bundle"])
#
# 1. its GPU tests (block_gemm_gpu_test's *Wgmma* tests: the dequantised
#    double reference, every scale layout, edges, split-K, bias, beta 1, the
#    trainer's self-check, agreement with cuBLASLt), at most 60 s (a kernel
#    that hangs fails here alone);
# 2. a linear's three GEMMs at 350M (1024 → 4096) and 1.3B (2048 → 8192),
#    N = 8192 tokens: bf16, cuBLASLt's block-scaled fp8 (fp8_gemm) and ours
#    (fp8_wgmma: its default plan, 192- or 128-row tiles; _m128: 128-row
#    tiles, the default before session 27; _m192: 192-row tiles, _m192_1x2
#    the same in pairs sharing a's tiles; _1x1: no cluster; _pp: the
#    consumer warpgroups taking turns), ms per call and
#    TFLOP/s (core/kernels/bench:fp8_linear_benchmark); then, in a run of
#    their own, ROWS (default fp8_wgmma_m192_1x2, fp8_wgmma_m128_ov: 128-row
#    tiles, each consumer's next block issued before it promotes — slower,
#    session 28 — and fp8_wgmma_pf: the old y prefetched into L2, which only
#    the wgrad (beta 1) reads, the default plan's since session 28; others
#    e.g. 'fp8_wgmma_bulk|fp8_wgmma_2x2');
# 3. Nsight Compute on the kernel (PROFILE=0 skips it): tensor-pipe use,
#    issue rate, the warps' top stall reasons;
# 4. only when 1 passed and STEPS > 0 (default 40): 350M and 1.3B training,
#    bf16 against fp8 with cuBLASLt's GEMMs and with ours
#    (train.fp8_gemm=wgmma), STEPS steps each, through fp8_check.sh.
# The exit status is 1 when a test failed. Logs in $OUT/wgmma_check (the
# device tool) or a temp dir.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
source "$ROOT/tools/bench/layouts.sh"  # bench_start, run_gpu_test
bench_start wgmma_check "$ROOT" || exit 2  # LOG, WORK, B
status=0

echo "=== 1. the wgmma GEMM's GPU tests"
GTEST_FILTER='*Wgmma*' run_gpu_test core_kernels_fp8_block_gemm_gpu_test 120 || status=1
grep -E 'worst' "$LOG/core_kernels_fp8_block_gemm_gpu_test.log" | cut -c1-160 | head -30

echo "=== 2. a linear's GEMMs (ms per call, TFLOP/s): bf16, cuBLASLt fp8, wgmma fp8"
# Two runs: the established rows, then ROWS, so a plan that hangs costs
# only its own rows.
shapes='BM_Fp8Linear/(350m_1024x4096|1p3b_2048x8192)/.*'
for impls in 'bf16|fp8_gemm|fp8_wgmma|fp8_wgmma_m128|fp8_wgmma_m192|fp8_wgmma_1x1|fp8_wgmma_pp' \
  "${ROWS-fp8_wgmma_m192_1x2|fp8_wgmma_m128_ov|fp8_wgmma_pf}"; do
  [[ -n "$impls" ]] || continue  # ROWS='' : none (an empty group would match every row)
  (cd "$B" && timeout 150 ./bin/core_kernels_bench_fp8_linear_benchmark \
    --benchmark_filter="$shapes/($impls)/" >> "$LOG/fp8_linear_benchmark.txt" 2>&1) ||
    echo "benchmark rc $? ($impls)"
done
# Name, ms, then TFLOP/s (and, for the plan rows, the clusters that fit and the splits).
grep '^BM_' "$LOG/fp8_linear_benchmark.txt" | sed 's|BM_Fp8Linear/||; s|/min_time:0.050||; s|/manual_time||' |
  sort -s -t/ -k1,2 |
  awk '{printf "%s %s", $1, $2; for (i = 4; i <= NF; ++i) if ($i ~ /=/) printf " %s", $i; print ""}'

echo "=== 3. Nsight Compute on the kernel (PROFILE=0 skips): where its cycles go"
# One launch each of the 1.3B forward (2048 → 8192: b a 128×128 tile; the
# default plan, 128-row tiles) and wgrad (b's scales per column; the
# default plan, and overlapped consumers): the
# tensor pipe's use, the issue rate, shared-memory and L2 throughput, and
# the warps' stall reasons (the raw
# metrics of the sections below; no metric named, so none can be missing
# on another ncu). Up to 4 × 60 s.
if [[ "${PROFILE:-1}" == 0 ]]; then
  echo "SKIPPED Nsight Compute (PROFILE=0)"
elif PATH="$PATH:/usr/local/cuda/bin" command -v ncu > /dev/null; then
  for row in 1p3b_2048x8192/fwd/fp8_wgmma/ 1p3b_2048x8192/fwd/fp8_wgmma_m128/ \
    1p3b_2048x8192/wgrad/fp8_wgmma/ 1p3b_2048x8192/wgrad/fp8_wgmma_m128_ov/; do
    name="$(echo "$row" | tr '/' '_')"
    (cd "$B" && PATH="$PATH:/usr/local/cuda/bin" timeout 60 ncu --csv --page raw \
      --section SpeedOfLight --section ComputeWorkloadAnalysis --section SchedulerStats \
      --section WarpStateStats --section MemoryWorkloadAnalysis --kernel-name regex:WgmmaGemmKernel --launch-skip 2 --launch-count 1 \
      ./bin/core_kernels_bench_fp8_linear_benchmark --benchmark_filter="BM_Fp8Linear/$row" \
      > "$LOG/ncu_$name.csv" 2> "$LOG/ncu_$name.err") || true
    echo "--- $row"
    python3 - "$LOG/ncu_$name.csv" <<'PY'
import csv, sys
lines = open(sys.argv[1], errors="replace").read().splitlines()
start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
if start is None:
    print("  (no ncu rows: see the .err log)")
    sys.exit(0)
rows = list(csv.reader(lines[start:]))
head, units = rows[0], rows[1]
vals = rows[2] if len(rows) > 2 else []
m = {h: (v, u) for h, u, v in zip(head, units, vals)}
def show(pred, top=None):
    hits = [(h, v, u) for h, (v, u) in m.items() if pred(h)]
    def num(v):
        try: return float(v.replace(",", ""))
        except ValueError: return 0.0
    if top:
        hits = sorted(hits, key=lambda t: -num(t[1]))[:top]
    for h, v, u in hits:
        print(f"  {h} = {v} {u}".rstrip())
show(lambda h: h in ("gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
                     "smsp__issue_active.avg.pct_of_peak_sustained_active",
                     "smsp__average_warp_latency_per_inst_issued.ratio"))
# The tensor pipe's totals (not each instruction kind's, not min / max).
show(lambda h: h.startswith("sm__pipe_tensor_cycles_active.avg") or
     h == "sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_active")
# Shared memory carries the TMA writes and every wgmma's operand reads;
# L2 the TMA loads.
show(lambda h: "shared" in h and "pct" in h and ".min." not in h and ".max." not in h, top=4)
show(lambda h: h.startswith("lts__") and "pct" in h, top=3)
stalls = lambda h: "issue_stalled" in h and h.endswith(".ratio")
if not any(stalls(h) for h in m):
    stalls = lambda h: "issue_stalled" in h
show(stalls, top=8)
PY
  done
else
  echo "SKIPPED Nsight Compute (ncu not on PATH)"
fi

if ((status == 0)) && (("${STEPS:-40}" > 0)); then
  echo "=== 4. training: bf16, fp8 (cuBLASLt), fp8 (wgmma)"
  STEPS="${STEPS:-40}" CASES="${CASES:-g350 g1p3}" VARIANTS="fp8 fp8g" \
    bash "$ROOT/tools/bench/fp8_check.sh" || status=1
fi
rm -rf "$WORK"
exit $status
