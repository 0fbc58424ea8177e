#!/usr/bin/env bash
# tools/bench/acceptance.sh — the GPU-speed issue's measurements in one device
# call (GPU machine, repo root, after `tools/gpu.sh bundle` was carried):
#   1. GPT-2 124M, B=8: gtp bf16 vs torch eager and torch.compile, 200 steps
#      (speed, memory, loss agreement);
#   2. GPT-2 124M, B=16 and 3. 350M (24 layers, C=1024, 16 heads), B=8:
#      gtp vs torch.compile, fewer steps (speed only);
#   4. gtp f32 on case 1's data: its losses vs gtp bf16's;
#   5. CUDA graphs on vs off (tools/bench/graphs_check.sh);
#   6. the MoE issue's GPU shape (GPT-2 small, every MLP 8 experts of hidden
#      1536, top-2) vs PyTorch's MoE of the same shape (speed only);
#   7. the hybrid Mamba-2 stack (`M*-` × 6, width 768, B=8): gtp only (no
#      PyTorch Mamba-2 on the machine);
#   8. the SSD scan alone at the hybrid's heads (H96·P16·N16, B=8), T = 1024,
#      4096, 8192: gtp's default kernels (ssm_benchmark ScanAuto, f32) beside
#      torch.compile's chunked form (tools/bench/torch_ssd.py, bf16);
#   9. train.precision=fp8 at 124M (case 1's weights and batches: speed, and
#      its losses against gtp bf16's) and 350M (speed; case 3's shape).
#      tools/bench/fp8_check.sh has the fuller fp8 comparison (1.3B, hybrid,
#      MoE, 300 steps).
# Each case's log and gtp metrics land in $ACC_DIR/<case>.{log,jsonl}
# (default /tmp/gtp_acceptance); torch's per-step losses are in the logs.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
export PYTHONUNBUFFERED=1
ACC_DIR="${ACC_DIR:-/tmp/gtp_acceptance}"
mkdir -p "$ACC_DIR"
run_case() {  # name, env assignments...
  local name="$1"; shift
  echo "=== $name"
  env -u OUT "$@" TMPDIR="$ACC_DIR" bash tools/bench/bench.sh > "$ACC_DIR/$name.log" 2>&1
  local rc=$?
  grep -A6 "^| run" "$ACC_DIR/$name.log"
  grep -A4 "^loss agreement" "$ACC_DIR/$name.log"
  local work
  work="$(sed -n 's/^bench: work dir //p' "$ACC_DIR/$name.log")"
  [ -n "$work" ] && cp "$work/gtp/metrics.jsonl" "$ACC_DIR/$name.jsonl" 2>/dev/null
  [ $rc -eq 0 ] || { echo "$name failed (rc $rc):"; tail -20 "$ACC_DIR/$name.log"; }
}
run_case gpt124m_b8 STEPS="${STEPS:-200}" MODES="eager compile"
run_case gpt124m_b16 STEPS="${STEPS_SHORT:-40}" B=16 MODES="compile"
run_case gpt350m_b8 STEPS="${STEPS_SHORT:-40}" N_LAYER=24 N_EMBD=1024 N_HEAD=16 MODES="compile"
run_case gpt124m_b8_f32 STEPS="${STEPS:-200}" PRECISION=f32 MODES=" "
run_case moe124m_b8 STEPS="${STEPS_SHORT:-40}" MOE_EXPERTS=8 MOE_FFN=1536 MODES="eager compile"

# gtp bf16 vs gtp f32 on the same weights and batches (steps 21..N).
python3 - "$ACC_DIR/gpt124m_b8.jsonl" "$ACC_DIR/gpt124m_b8_f32.jsonl" <<'PY'
import json, sys
def losses(p):
    out = {}
    for line in open(p):
        r = json.loads(line)
        if "loss" in r: out[r["step"]] = r["loss"]
    return out
a, b = losses(sys.argv[1]), losses(sys.argv[2])
steps = sorted(s for s in a if s in b and s >= 21)
if steps:
    d = [abs(a[s] - b[s]) for s in steps]
    last = steps[-1]
    print("gtp-bf16 vs gtp-f32: steps %d..%d: mean |Δ| %.5f, max |Δ| %.5f, final loss rel diff %.2e"
          % (steps[0], last, sum(d) / len(d), max(d), abs(a[last] - b[last]) / abs(b[last])))
PY

run_case gpt124m_b8_fp8 STEPS="${STEPS:-200}" PRECISION=fp8 MODES=" "
run_case gpt350m_b8_fp8 STEPS="${STEPS_SHORT:-40}" N_LAYER=24 N_EMBD=1024 N_HEAD=16 PRECISION=fp8 MODES=" "
python3 - "$ACC_DIR/gpt124m_b8.jsonl" "$ACC_DIR/gpt124m_b8_fp8.jsonl" <<'PY'
import json, statistics, sys
def rows(p):
    try:
        return {r["step"]: r for r in map(json.loads, open(p)) if "loss" in r}
    except OSError:
        return {}
a, b = rows(sys.argv[1]), rows(sys.argv[2])
steps = sorted(s for s in a if s in b)
if steps:
    d = [abs(a[s]["loss"] - b[s]["loss"]) for s in steps]
    ma = statistics.median(a[s]["ms"] for s in steps if s > 10)
    mb = statistics.median(b[s]["ms"] for s in steps if s > 10)
    last = steps[-1]
    print("gtp-fp8 vs gtp-bf16 (124M): %.3fx the speed; losses over %d steps: mean |d| %.4f, "
          "final rel diff %.2e" % (ma / mb, len(steps), sum(d) / len(d),
                                   abs(b[last]["loss"] - a[last]["loss"]) / a[last]["loss"]))
PY

echo "=== hybrid M*- x 6"
run_case hybrid_b8 STEPS="${STEPS_SHORT:-40}" HYBRID_PATTERN="M*-M*-M*-M*-M*-M*-" MODES=" "

echo "=== SSD scan: gtp (f32, default kernels) vs torch.compile (bf16, chunked)"
SCAN_DIR="$ACC_DIR/scan_bundle"
mkdir -p "$SCAN_DIR"
tar -C "$SCAN_DIR" -xJf "${GTP_BUNDLE_DIR:-$ROOT/.bundle}/bundle.tar.xz" ./bin/core_kernels_bench_ssm_benchmark ./lib \
  && (cd "$SCAN_DIR" && LD_LIBRARY_PATH="$SCAN_DIR/lib:/usr/local/cuda/lib64" \
        ./bin/core_kernels_bench_ssm_benchmark --benchmark_filter='ScanAuto' 2>&1 | grep '^BM_')
python3 tools/bench/torch_ssd.py --shapes h96p16n16 2>&1 | grep -v '^W[0-9]' | tail -8

echo "=== cuda graphs on vs off"
bash "$ROOT/tools/bench/graphs_check.sh"
