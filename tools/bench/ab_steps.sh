#!/usr/bin/env bash
# tools/bench/ab_steps.sh — one change's before and after on whole training
# steps, in one device call: the train binaries of two bundles run
# alternately (old, new, old, new, …: PAIRS pairs a case) on the same model,
# weights and batches, with fp8_check.sh's settings (layouts.sh's bench_base
# and bench_case: B = 8, T = 1024, the corpus data), STEPS steps a run
# (SHORT_STEPS for the hybrid and MoE cases).
#
#   (here, on the old tree) GTP_BUNDLE_DIR=$PWD/.bundle-old tools/gpu.sh bundle //recipes/gpt_124m:train
#   (here, on the new tree) tools/gpu.sh bundle //recipes/gpt_124m:train
#   (device tool) run(command="OLD=.bundle-old NEW=.bundle CASES='g124 g1p3' bash tools/bench/ab_steps.sh",
#                     carry=[".bundle-old", ".bundle"])
#
# Per pair it prints each run's median ms/step over steps 11..N, the new
# run's speed-up (old ms / new ms) and MFU, and whether the two runs' losses
# are bit-identical — what a change that keeps every summation order must
# give — or else the largest and the mean |Δloss| over the steps both ran
# and the two final losses. Alternating the two binaries in pairs
# puts the machine's drift into both sides; read the pairs' spread as the
# noise.
#
# OLD, NEW: folders holding bundle.tar.xz (NEW defaults to .bundle).
# CASES (default g124): g124 g350 g1p3 hybrid moe moeb (layouts.sh
# bench_case; RATES gpt3 or recipe as fp8_check.sh). STEPS (default 40),
# SHORT_STEPS (default 60), PAIRS (default 2), PRECISION (default bf16),
# EXTRA (settings added to every run), RUN_TIMEOUT (seconds a run, default
# 400, layouts.sh bench_train), DEVICE (default cuda; cpu for this script's own test).
# Logs and metrics in $OUT/ab_steps (device tool) or a temp dir. Exit 1 when
# a run failed, 2 on a bad argument.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
source "$ROOT/tools/bench/layouts.sh"  # bench_base, bench_case, bench_train

OLD="${OLD:-}" NEW="${NEW:-.bundle}"
STEPS="${STEPS:-40}" SHORT_STEPS="${SHORT_STEPS:-60}" PAIRS="${PAIRS:-2}"
PRECISION="${PRECISION:-bf16}" CASES="${CASES:-g124}" RATES="${RATES:-gpt3}"
if [[ -z "$OLD" ]]; then
  echo "ab_steps: OLD=<a folder holding the old tree's bundle.tar.xz> (and NEW, default .bundle)" >&2
  exit 2
fi
for b in "$OLD" "$NEW"; do
  [[ -f "$b/bundle.tar.xz" ]] || { echo "ab_steps: no $b/bundle.tar.xz" >&2; exit 2; }
done
for c in $CASES; do bench_case "$c" "$RATES" > /dev/null || exit 2; done
[[ "$PAIRS" =~ ^[1-9][0-9]*$ ]] || { echo "ab_steps: PAIRS=$PAIRS (a count)" >&2; exit 2; }

LOG="${OUT:+$OUT/ab_steps}"
LOG="${LOG:-$(mktemp -d)}"
mkdir -p "$LOG"
WORK="$(mktemp -d)"
for side in old new; do
  b="$OLD"
  [[ $side == new ]] && b="$NEW"
  mkdir -p "$WORK/$side" && tar -C "$WORK/$side" -xJf "$b/bundle.tar.xz" || exit 2
  [[ -x "$WORK/$side/bin/recipes_gpt_124m_train" ]] ||
    { echo "ab_steps: $b's bundle has no recipes_gpt_124m_train" >&2; exit 2; }
done
export NCCL_NVLS_ENABLE=0 OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-8}"
command -v nvidia-smi > /dev/null &&
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
BASE="$(bench_base "${DEVICE:-cuda}")"
status=0

run() {  # side case pair steps extra (logs as <case>_<side><pair>)
  bench_train "$WORK/$1" "$2_$1$3" \
    "$BASE,train.precision=$PRECISION,train.steps=$4${5:+,$5}${EXTRA:+,$EXTRA}" || status=1
}

for c in $CASES; do
  bench_case "$c" "$RATES"
  steps=$STEPS
  if ((CASE_SHORT)); then steps=$SHORT_STEPS; fi
  echo "=== $c ($steps steps, $PRECISION${EXTRA:+, $EXTRA})"
  for ((p = 1; p <= PAIRS; ++p)); do
    run old "$c" "$p" "$steps" "$CASE_SET"
    run new "$c" "$p" "$steps" "$CASE_SET"
    /usr/bin/env python3 - "$LOG/${c}_old$p.jsonl" "$LOG/${c}_new$p.jsonl" "$p" <<'PY'
import json, os, statistics, sys
old, new, pair = sys.argv[1], sys.argv[2], sys.argv[3]
if not (os.path.exists(old) and os.path.exists(new)):
    print(f"  pair {pair}: a run is missing"); sys.exit(0)
ra, rb = ([r for r in map(json.loads, open(p)) if "loss" in r] for p in (old, new))
ma = statistics.median(r["ms"] for r in ra if r["step"] > 10)
mb = statistics.median(r["ms"] for r in rb if r["step"] > 10)
mfu = statistics.median(r.get("mfu", 0) for r in rb if r["step"] > 10)
la, lb = [r["loss"] for r in ra], [r["loss"] for r in rb]
if len(la) == len(lb) and la == lb:
    losses = f"losses bit-identical (sum {sum(la):.6f})"
else:
    ds = [abs(a - b) for a, b in zip(la, lb)]
    if ds:
        losses = (f"losses differ: max |d| {max(ds):.2e}, mean |d| {sum(ds) / len(ds):.2e} over "
                  f"{len(ds)} steps; final {la[-1]:.4f} (old) and {lb[-1]:.4f} (new)")
    else:
        losses = "losses differ: a run has none"
print(f"  pair {pair}: old {ma:.2f} ms, new {mb:.2f} ms ({ma / mb:.3f}x; new MFU {100 * mfu:.1f} %); {losses}")
PY
  done
done
rm -rf "$WORK"
exit $status
