#!/usr/bin/env bash
# tools/bench/kernels_check.sh — issue 31's new kernels in one short device
# call (about 5 minutes on an H200, plus the sanitizer runs and the profile,
# which come last: up to 6 × 100 s and 5 × 60 s, so a call's 600 s may cut
# them; SANITIZE=0 and PROFILE=0 skip them): their GPU tests, the scan's
# times beside each other, and the hybrid step with the default kernels.
#
#   (here)        tools/gpu.sh bundle
#   (device tool) run(command="bash tools/bench/kernels_check.sh", carry=[".bundle"])
#
# 1. the GPU tests of core/kernels/fp8 (block quantisers, block-scaled GEMM
#    with its bias epilogue, the linear's three GEMMs; the GEMM's layout probe
#    runs first and prints what cuBLASLt did) and of
#    core/kernels/ssm (both scan kernel sets and kAuto against the CPU), the
#    column sums (bias gradients), the FP8 experts, the embedding backward,
#    AdamW, the GEMM (its c_in: residuals in the epilogue) and the Mamba mixer
#    (bf16 scan products in bf16 models) against the CPU;
# 2. ssm_benchmark: the scan at the hybrid's heads and at P = N = 64,
#    chunked (kChunked), a warp per chunk (kChunkedMma: 32-step chunks at
#    these heads since 2026-12-05; kChunkedMmaBf16) and the recurrence, and the default (ScanAuto: kChunkedMma at these heads
#    since 2026-12-05; ScanMmaBf16: the bf16 products a bf16 model's mixer
#    runs) at T = 1024, 4096, 8192 beside torch.compile's chunked
#    form (tools/bench/torch_ssd.py, bf16), and the mixer's
#    conv1d and gated RMSNorm; the optimizer's AdamW; gemm_benchmark's
#    bias gradients, cuBLASLt's epilogue vs
#    ColumnSumAccumulate;
# 3. the hybrid bench shape (`M*-` × 6, width 768, B=8, T=1024, bf16), 40
#    steps: the median ms/step of steps 11–40; with BASE_BUNDLE_DIR=<folder of
#    another bundle.tar.xz> the same through that bundle too; each run's
#    losses against the first's (a kernel change's speed and agreement);
# 4. compute-sanitizer's racecheck, synccheck and memcheck on the scan's
#    kernels at small shapes (ssm_gpu_test's HeadGroupsSmall: every kernel,
#    kChunkedMma's included) and on the embedding backward's skewed-id tests;
# 5. Nsight Compute on the scan's kernels at the hybrid's shape (kChunkedMma,
#    f32-accurate and bf16 products): duration, occupancy, issue rate (PROFILE=0 skips);
#    with BASE_BUNDLE_DIR, part 2's scan rows also through that bundle.
# Each part prints PASS/FAIL or its figures; the exit status is 1 when a
# test failed. Logs in $OUT/kernels_check when $OUT is set (the device
# tool), else a temp dir.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
source "$ROOT/tools/bench/layouts.sh"  # bench_start, run_gpu_test
bench_start kernels_check "$ROOT" || exit 2  # LOG, WORK, B
status=0

echo "=== 1. GPU tests"
for t in core_kernels_fp8_block_quant_gpu_test core_kernels_fp8_block_gemm_gpu_test \
  core_kernels_fp8_linear_gpu_test core_kernels_nvfp4_gpu_test core_kernels_ssm_ssm_gpu_test \
  core_kernels_column_sum_gpu_test layers_moe_experts_fp8_gpu_test \
  core_kernels_embedding_gpu_test core_kernels_adamw_gpu_test core_kernels_gemm_gpu_test \
  layers_mamba_mamba_mixer_gpu_test; do
  run_gpu_test "$t" 300 || status=1
done

echo "=== 2. the scan, conv1d and gated norm (f32 ms; B=8)"
# ssm_benchmark times a fixed 20 iterations a row since 61cc9cb, so
# --benchmark_min_time is ignored here; it still bounds the rows of a
# BASE_BUNDLE_DIR bundle built before that (at the default 0.5 s a row, part 2
# ran past its limit on 2026-12-05).
(cd "$B" && timeout 200 ./bin/core_kernels_bench_ssm_benchmark \
  --benchmark_min_time=0.1 --benchmark_filter='Scan/h96p16n16/.*(chunked|recurrence|mma|mma_bf16)/|Scan/h24p64n64/.*(chunked|recurrence|mma)/|ScanAuto|ScanMmaBf16|Conv1d|GatedRmsNorm' 2>&1) |
  grep '^BM_' | awk '{printf "%-60s %s %s\n", $1, $2, $3}'
if [[ -n "${BASE_BUNDLE_DIR:-}" ]]; then
  # The same scan, conv1d and gated-norm rows through the other bundle's
  # benchmark (a kernel change's speed, old and new side by side in this call).
  mkdir -p "$WORK/base_scan" && tar -C "$WORK/base_scan" -xJf "$BASE_BUNDLE_DIR/bundle.tar.xz"
  echo "--- the same rows through BASE_BUNDLE_DIR's bundle"
  (cd "$WORK/base_scan" && LD_LIBRARY_PATH="$WORK/base_scan/lib:/usr/local/cuda/lib64" timeout 120 \
    ./bin/core_kernels_bench_ssm_benchmark \
    --benchmark_min_time=0.1 --benchmark_filter='Scan/h96p16n16/.*(chunked|recurrence|mma)/|Conv1d|GatedRmsNorm' 2>&1) |
    grep '^BM_' | awk '{printf "base %-55s %s %s\n", $1, $2, $3}'
fi
echo "=== 2a. torch.compile's chunked scan (bf16; the acceptance anchor for ScanAuto)"
timeout 150 python3 tools/bench/torch_ssd.py --shapes h96p16n16 2>&1 | grep -v '^W[0-9]' | tail -8

echo "=== 2b. bias gradients (ms per call; N = 8192)"
(cd "$B" && timeout 120 ./bin/core_kernels_bench_gemm_benchmark \
  --benchmark_filter='BiasGrad' 2>&1) |
  grep '^BM_' | awk '{printf "%-60s %s %s\n", $1, $2, $3}'

echo "=== 2c. AdamW (ms per call; bytes: the rate of the 30 bytes an element, T/s = TB/s)"
(cd "$B" && timeout 60 ./bin/core_kernels_bench_adamw_benchmark 2>&1) |
  grep '^BM_' | awk '{s = ""; for (i = 7; i <= NF; ++i) s = s " " $i; printf "%-40s %s %s%s\n", $1, $2, $3, s}'

echo "=== 3. hybrid step (bf16, B=8, T=1024, default kernels)"
# With BASE_BUNDLE_DIR (a folder holding another bundle.tar.xz, e.g. the tree
# before a kernel change, carried beside .bundle) the same run also goes
# through that bundle's trainer: both medians and the two runs' losses.
HYBRID_SET=model.vocab_size=50257,model.seq_len=1024,train.micro_batch=8,train.global_batch=8,train.precision=bf16,model.layer_pattern=M*-M*-M*-M*-M*-M*-,model.n_layer=18,data.source=corpus,train.steps=40,train.log_every=1,train.eval_every=0,train.device=cuda,checkpoint.every=0,checkpoint.disable=true,checkpoint.no_resume=true
hybrid() {  # label bundle-dir (unpacked) [extra settings]
  local run
  run="$(mktemp -d)"
  if LD_LIBRARY_PATH="$2/lib:/usr/local/cuda/lib64" timeout 180 "$2/bin/recipes_gpt_124m_train" \
    --config recipes/gpt_124m/gpt_124m.pbtxt --noprogress --run_dir "$run" --set "$HYBRID_SET${3:+,$3}" \
    > "$LOG/hybrid_$1.log" 2>&1; then
    cp "$run/metrics.jsonl" "$LOG/hybrid_$1.jsonl"
  else
    echo "FAIL hybrid run ($1)"
    tail -20 "$LOG/hybrid_$1.log"
    status=1
  fi
  rm -rf "$run"
}
hybrid this "$B"
if [[ -n "${BASE_BUNDLE_DIR:-}" ]]; then
  mkdir -p "$WORK/base" && tar -C "$WORK/base" -xJf "$BASE_BUNDLE_DIR/bundle.tar.xz" && hybrid base "$WORK/base"
fi
python3 - "$LOG"/hybrid_*.jsonl <<'PY'
import json, statistics, sys
runs = {}
for f in sys.argv[1:]:
    rows = [r for r in map(json.loads, open(f)) if "loss" in r and "step" in r]
    runs[f.rsplit("hybrid_", 1)[1][:-6]] = rows
    ms = [r["ms"] for r in rows if r["step"] > 10 and "ms" in r]
    print(f"hybrid ({f.rsplit('hybrid_', 1)[1][:-6]}): median {statistics.median(ms):.2f} ms/step "
          f"over {len(ms)} steps, final loss {rows[-1]['loss']:.4f}" if ms else f"{f}: no step times")
for name, b in runs.items():
    if name == "this" or "this" not in runs:
        continue
    d = [abs(x["loss"] - y["loss"]) for x, y in zip(runs["this"], b)]
    print(f"hybrid losses, this vs {name}: mean |d| {sum(d) / len(d):.2e}, max |d| {max(d):.2e} "
          f"over {len(d)} steps")
PY

echo "=== 4. compute-sanitizer on the shared-memory protocols changed last (small shapes)"
# The scan's heads kernels (ssm_gpu_test's HeadGroupsSmall, 3 cases) and the
# embedding backward's segment blocks (embedding_gpu_test's two skewed-id
# tests); racecheck, synccheck, memcheck each, up to 100 s a run.
# (On a gVisor runtime compute-sanitizer refuses the device: device/KINDS.md.)
sanitize() {  # binary gtest-filter expected-ok-count
  local bin="$1" filter="$2" want="$3" tool log ok
  for tool in racecheck synccheck memcheck; do
    log="$LOG/sanitizer_${bin}_$tool.log"
    if (cd "$B" && PATH="$PATH:/usr/local/cuda/bin" timeout 100 compute-sanitizer --tool "$tool" \
      --error-exitcode 3 "./bin/$bin" --gtest_filter="$filter" > "$log" 2>&1); then
      ok="$(grep -c '^\[       OK' "$log")"
      if ((ok == want)); then
        echo "PASS $tool $bin ($ok ok)"
      else  # all skipped (no GPU seen) or the filter matched fewer
        echo "FAIL $tool $bin ($ok of the $want cases of $filter ran and passed)"
        status=1
      fi
    elif grep -q 'Device not supported' "$log"; then
      echo "SKIPPED $tool $bin (this runtime refuses compute-sanitizer: Device not supported)"
    else
      echo "FAIL $tool $bin"
      grep -E 'ERROR|Error|hazard|Race|Invalid|FAILED' "$log" | head -20
      status=1
    fi
  done
}
if [[ "${SANITIZE:-1}" == 0 ]]; then
  echo "SKIPPED compute-sanitizer (SANITIZE=0)"
elif PATH="$PATH:/usr/local/cuda/bin" command -v compute-sanitizer > /dev/null; then
  sanitize core_kernels_ssm_ssm_gpu_test 'HeadGroupsSmall/*' 3
  sanitize core_kernels_embedding_gpu_test '*SkewedIds*' 2
else
  echo "SKIPPED compute-sanitizer (not on PATH)"
fi

echo "=== 5. Nsight Compute on the scan's kernels at the hybrid's shape (PROFILE=0 skips)"
# One forward and one backward of kChunkedMma (the default; 32-step chunks
# at these heads), and the backward with bf16 products (H96·P16·N16, B=8,
# T=1024): per kernel its duration, occupancy, issue rate and the sizes
# that bound its blocks an SM — what decides the next change to the
# warp-level scan. Up to 300 s.
if [[ "${PROFILE:-1}" == 0 ]]; then
  echo "SKIPPED Nsight Compute (PROFILE=0)"
elif PATH="$PATH:/usr/local/cuda/bin" command -v ncu > /dev/null; then
  for row in 'Scan/h96p16n16/bwd/mma/' 'Scan/h96p16n16/fwd/mma/' 'Scan/h96p16n16/bwd/mma_bf16/'; do
    name="$(echo "$row" | tr '/' '_')"
    (cd "$B" && PATH="$PATH:/usr/local/cuda/bin" timeout 60 ncu --csv --page details \
      --section SpeedOfLight --section Occupancy --section LaunchStats --section SchedulerStats \
      --section WarpStateStats --kernel-name 'regex:Mma|Chunk|Ssd|Pass|Scalars|SumGroup' \
      --launch-skip 4 --launch-count 8 \
      ./bin/core_kernels_bench_ssm_benchmark --benchmark_filter="$row" \
      > "$LOG/ncu_$name.csv" 2> "$LOG/ncu_$name.err") || true
    echo "--- $row"
    python3 - "$LOG/ncu_$name.csv" <<'PY'
import csv, re, sys
keep = ["Duration", "Registers Per Thread", "Dynamic Shared Memory Per Block",
        "Theoretical Occupancy", "Achieved Occupancy", "Block Limit Registers",
        "Block Limit Shared Mem", "Compute (SM) Throughput", "Memory Throughput",
        "Issued Warp Per Scheduler", "No Eligible", "Warp Cycles Per Issued Instruction"]
lines = open(sys.argv[1], errors="replace").read().splitlines()
start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
if start is None:
    print("  (no ncu rows: see the .err log)")
    sys.exit(0)
seen = {}
for r in csv.DictReader(lines[start:]):
    k = re.sub(r"\(.*", "", r["Kernel Name"].replace("(anonymous namespace)::", ""))
    k = re.sub(r"^void |gtp::kernels::ssm::cuda::", "", k)
    m = r["Metric Name"]
    if m in keep and (k, m) not in seen:
        seen[(k, m)] = f'{r["Metric Value"]} {r["Metric Unit"]}'.strip()
for k in dict.fromkeys(k for k, _ in seen):
    print("  " + k + ": " + "; ".join(f"{m} {seen[(k, m)]}" for m in keep if (k, m) in seen))
PY
  done
else
  echo "SKIPPED Nsight Compute (ncu not on PATH)"
fi

rm -rf "$WORK"
exit $status
