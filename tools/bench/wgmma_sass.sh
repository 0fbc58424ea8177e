#!/usr/bin/env bash
# tools/bench/wgmma_sass.sh — where the wgmma FP8 GEMM kernel's warps wait,
# instruction by instruction, in one device call (about 2 minutes):
#
#   (here)        tools/gpu.sh bundle //core/kernels/bench:fp8_linear_benchmark //tools/gtprun:gtprun //recipes/gpt_124m:train
#   (device tool) run(command="bash tools/bench/wgmma_sass.sh [ROW...]", carry=[".bundle"])
#
# For each benchmark row (default: the 1.3B forward with the default plan),
# Nsight Compute's source page of WgmmaGemmKernel in SASS: per instruction,
# its warp-stall samples (all and not issued) and executions, kept whole in
# $OUT/wgmma_sass/*.csv; printed: the 40 instructions with the most stall
# samples. The SASS listing itself (cuobjdump) goes beside it.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
source "$ROOT/tools/bench/layouts.sh"  # bench_start
bench_start wgmma_sass "$ROOT" || exit 2  # LOG, WORK, B
export PATH="$PATH:/usr/local/cuda/bin"
rows=("$@")
((${#rows[@]})) || rows=(1p3b_2048x8192/fwd/fp8_wgmma/)
bench="$B/bin/core_kernels_bench_fp8_linear_benchmark"
if command -v cuobjdump > /dev/null; then
  cuobjdump -sass "$bench" 2> /dev/null | awk '/Function : .*WgmmaGemmKernel/{p=1} /Function : /&&!/WgmmaGemmKernel/{p=0} p' \
    > "$LOG/sass.txt"
  echo "cuobjdump: $(grep -c 'Function :' "$LOG/sass.txt") kernels, $(wc -l < "$LOG/sass.txt") lines"
fi
for row in "${rows[@]}"; do
  name="$(echo "$row" | tr '/' '_')"
  (cd "$B" && timeout 120 ncu --section SourceCounters --section WarpStateStats --import-source no \
    --page source --csv --print-source sass --kernel-name regex:WgmmaGemmKernel --launch-skip 2 \
    --launch-count 1 "$bench" --benchmark_filter="BM_Fp8Linear/$row" \
    > "$LOG/src_$name.csv" 2> "$LOG/src_$name.err") || echo "ncu rc $? (see $LOG/src_$name.err)"
  echo "--- $row: the instructions with the most warp-stall samples"
  python3 - "$LOG/src_$name.csv" <<'PY'
import csv, sys
lines = open(sys.argv[1], errors="replace").read().splitlines()
start = next((i for i, l in enumerate(lines) if l.startswith('"Address"') or l.startswith('"#"')), None)
if start is None:
    print("  (no source rows)"); print("\n".join(lines[:15])); sys.exit(0)
rows = list(csv.reader(lines[start:]))
head = rows[0]
def col(*keys):
    for k in keys:
        for i, h in enumerate(head):
            if k.lower() in h.lower(): return i
    return None
src, allc = col("Source"), col("Warp Stall Sampling (All", "Sampling (All")
nis, ex = col("Not-issued", "Not Issued"), col("Instructions Executed")
def num(v):
    try: return float(v.replace(",", ""))
    except (ValueError, AttributeError): return 0.0
body = [r for r in rows[1:] if len(r) == len(head)]
total = sum(num(r[allc]) for r in body) if allc is not None else 0
print(f"  {len(body)} instructions, {total:.0f} samples")
if allc is None or ex is None:
    print("  columns:", head); sys.exit(0)
# Where the samples fall by how often an instruction ran: the code of one
# loop runs equally often (the consumers' K-block loop, their epilogue once
# a tile, the producer's loop), so these groups split the time by region.
groups = {}
for r in body:
    g = groups.setdefault(int(num(r[ex])), [0.0, 0, ""])
    g[0] += num(r[allc]); g[1] += 1
    if not g[2] and any(k in r[src] for k in ("QGMMA", "STG", "UTMALDG", "LDGSTS", "SYNCS")):
        g[2] = r[src].split()[0 if not r[src].lstrip().startswith("@") else 1]
print("  samples by execution count (count: share, instructions, e.g.):")
for n, (smp, k, what) in sorted(groups.items(), key=lambda x: -x[1][0])[:6]:
    print(f"    {n:>9}: {100*smp/max(total,1):5.1f}%  {k:4d} instr  {what}")
for i, r in sorted(enumerate(body), key=lambda x: -num(x[1][allc]))[:30]:
    s = num(r[allc])
    print(f"  {i:5d} {100*s/max(total,1):5.1f}% nis={r[nis] if nis is not None else '?':>6} ex={r[ex]:>8}  {r[src][:90]}")
PY
done
