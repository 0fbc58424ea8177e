#!/usr/bin/env bash
# fp8_check.sh without a GPU: the script's plumbing, so a device call is not
# spent on a script error. A fake bundle's train binary first hands every
# run's --config/--set to the real recipe binary's --list_settings (which
# validates them as a cuda run would be, without a GPU), then writes metrics
# with closed-form losses and step times:
#   loss(step) = 10 − 0.01·step (+ 0.02 under fp8, + 0.005 at micro_batch 4)
#   ms = 100 (bf16) or 80 (fp8); with FAKE_DIE=1 it exits 3 after writing them
# so each fp8 row must read speed 100/80 = 1.250x, mean and max |Δloss| 0.0200
# and a final-step difference of 0.02 / (10 − 0.01·12) = 0.20 %; bf16m's row
# 1.000x and 0.0050. Unknown cases and variants must stop the script (exit 2).
set -euo pipefail
script="$1" train="$2"
train="$(cd "$(dirname "$train")" && pwd)/$(basename "$train")"
export TMPDIR="${TEST_TMPDIR:-$(mktemp -d)}"
source "$(dirname "$script")/fake_bundle.sh"
fake="$TMPDIR/fake_bundle"
fake_bundle "$fake" "$train" '
import os
fp8 = s["train.precision"] == "fp8"
ms = 80.0 if fp8 else 100.0
with open(sys.argv[1], "w") as f:
    for step in range(1, int(s["train.steps"]) + 1):
        loss = 10 - 0.01 * step + ((0.08 if step <= 10 else 0.02) if fp8 else 0) + (0.005 if s["train.micro_batch"] == "4" else 0)
        f.write(json.dumps({"step": step, "loss": loss, "ms": ms, "tokens_per_s": 8192e3 / ms,
                            "mfu": 0.5, "peak_mem_bytes": 2**30}) + "\n")
if os.environ.get("FAKE_DIE") == "1":  # a run that fails after its steps
    sys.exit(3)'
export GTP_BUNDLE_DIR="$fake" OUT="$TMPDIR/out"
rm -rf "$OUT"

log="$TMPDIR/fp8_check.log"
cases="g124 g350 g1p3 hybrid moe moeb"
if ! STEPS=12 SHORT_STEPS=12 CASES="$cases" VARIANTS="fp8 fp8w fp8g fp8gw fp8fl bf16m" \
    bash "$script" > "$log" 2>&1; then
  cat "$log"; echo "fp8_check.sh failed"; exit 1
fi
cat "$log"
want() {  # count pattern
  local n; n="$(grep -c -- "$2" "$log" || true)"
  [[ "$n" == "$1" ]] || { echo "expected $1 lines with '$2', got $n"; exit 1; }
}
# fp8's fake losses sit 0.08 above bf16's for steps 1-10, 0.02 after: the mean past the warm-up
# is the later steps' alone.
fp8_row='speed 1.250x;  losses over 12 steps: mean |d| 0.0700, max |d| 0.0800, final step rel 0.20 %, last-10 mean rel 0.69 %, mean |d| past the warm-up (steps 11-12) 0.0200'
want 30 "$fp8_row"  # five fp8 variants in six cases
want 6 'bf16m / bf16 speed 1.000x;  losses over 12 steps: mean |d| 0.0050, max |d| 0.0050'
want 0 '^FAIL'
# What each run was asked for (its log holds the settings the fake was given).
L="$OUT/fp8_check"
grep -q 'model.moe.aux_loss_coeff=0.01,model.moe.z_loss_coeff=0.001' "$L/moeb_fp8.log" || { echo "moeb: no balancing losses"; exit 1; }
if grep -q 'aux_loss_coeff' "$L/moe_fp8.log"; then echo "moe: balancing losses where none belong"; exit 1; fi
grep -q 'train.precision=bf16,.*train.micro_batch=4' "$L/g124_bf16m.log" || { echo "bf16m: not bf16 at micro-batch 4"; exit 1; }
grep -q 'optim.lr=2e-4,optim.min_lr=2e-5' "$L/g1p3_fp8.log" || { echo "g1p3: not GPT-3's 1.3B rate"; exit 1; }
grep -q 'train.fp8_gemm=wgmma,train.fp8_wgrad=bf16' "$L/g350_fp8gw.log" || { echo "fp8gw: settings"; exit 1; }
grep -q 'train.fp8_bf16_first_layers=1,train.fp8_bf16_last_layers=1' "$L/g1p3_fp8fl.log" || { echo "fp8fl: settings"; exit 1; }
# A failed run keeps its metrics so far in $OUT (layouts.sh bench_train), and says how many steps.
rc=0; FAKE_DIE=1 STEPS=7 CASES=g124 bash "$script" > "$TMPDIR/die.log" 2>&1 || rc=$?
[[ $rc == 1 ]] || { cat "$TMPDIR/die.log"; echo "failed runs: exit $rc, want 1"; exit 1; }
grep -q "^FAIL g124_bf16 (rc 3; metrics so far in $L/g124_bf16.run: 7 steps)" "$TMPDIR/die.log" || { cat "$TMPDIR/die.log"; echo "FAIL line"; exit 1; }
[[ "$(grep -c '"loss"' "$L/g124_fp8.run/metrics.jsonl")" == 7 ]] || { echo "fp8's partial metrics not kept"; exit 1; }
# EXTRA reaches every run of the case, after the case's own settings.
EXTRA=optim.warmup_steps=3 STEPS=12 CASES="g124 g350" VARIANTS="fp8 bf16m" bash "$script" > "$TMPDIR/extra.log" 2>&1 || { cat "$TMPDIR/extra.log"; echo "EXTRA run failed"; exit 1; }
for r in g124_bf16 g124_fp8 g124_bf16m g350_bf16 g350_fp8; do
  grep -q "train.steps=12,[^ ]*optim.warmup_steps=3" "$L/$r.log" || { echo "EXTRA: not in $r"; exit 1; }
done
grep -q 'optim.min_lr=3e-5,optim.warmup_steps=3' "$L/g350_fp8.log" || { echo "EXTRA: g350's rate lost"; exit 1; }
# Unknown names stop the script (exit 2).
for bad in "CASES=nope" "VARIANTS=nope"; do
  rc=0; env "$bad" STEPS=12 bash "$script" > "$TMPDIR/bad.log" 2>&1 || rc=$?
  [[ $rc == 2 ]] || { cat "$TMPDIR/bad.log"; echo "$bad: exit $rc, want 2"; exit 1; }
  grep -q "fp8_check: unknown" "$TMPDIR/bad.log" || { cat "$TMPDIR/bad.log"; exit 1; }
done
echo ok
