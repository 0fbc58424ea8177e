#!/usr/bin/env bash
# tools/bench/wgmma_check.sh — gtp's own block-scaled FP8 GEMM
# (Fp8GemmEngine::kWgmma, core/kernels/fp8/wgmma_gemm.cu) on the GPU in one
# device call (about 4 minutes with STEPS=0, 8 with the training runs):
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
#    (fp8_wgmma: its default plan; _1x1: no cluster; _pp: the consumer
#    warpgroups taking turns), ms per call and TFLOP/s
#    (core/kernels/bench:fp8_linear_benchmark);
# 3. only when 1 passed and STEPS > 0 (default 40): 350M and 1.3B training,
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
GTEST_FILTER='*Wgmma*' run_gpu_test core_kernels_fp8_block_gemm_gpu_test 60 || status=1
grep -E 'worst' "$LOG/core_kernels_fp8_block_gemm_gpu_test.log" | cut -c1-160 | head -30

echo "=== 2. a linear's GEMMs (ms per call, TFLOP/s): bf16, cuBLASLt fp8, wgmma fp8"
(cd "$B" && timeout 150 ./bin/core_kernels_bench_fp8_linear_benchmark \
  --benchmark_filter='BM_Fp8Linear/(350m_1024x4096|1p3b_2048x8192)/.*/(bf16|fp8_gemm|fp8_wgmma|fp8_wgmma_1x1|fp8_wgmma_pp)/' \
  > "$LOG/fp8_linear_benchmark.txt" 2>&1) || echo "benchmark rc $?"
# Name, ms, then TFLOP/s (and, for the plan rows, the clusters that fit and the splits).
grep '^BM_' "$LOG/fp8_linear_benchmark.txt" | sed 's|BM_Fp8Linear/||; s|/min_time:0.050||; s|/manual_time||' |
  awk '{printf "%s %s", $1, $2; for (i = 4; i <= NF; ++i) if ($i ~ /=/) printf " %s", $i; print ""}'

if ((status == 0)) && (("${STEPS:-40}" > 0)); then
  echo "=== 3. training: bf16, fp8 (cuBLASLt), fp8 (wgmma)"
  STEPS="${STEPS:-40}" CASES="${CASES:-g350 g1p3}" VARIANTS="fp8 fp8g" \
    bash "$ROOT/tools/bench/fp8_check.sh" || status=1
fi
rm -rf "$WORK"
exit $status
