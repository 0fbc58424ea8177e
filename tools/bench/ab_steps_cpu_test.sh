#!/usr/bin/env bash
# ab_steps.sh without a GPU: the script's plumbing, so a device call is not
# spent on a script error. Fake bundles' train binaries first hand every
# run's --config/--set to the real recipe binary's --list_settings (which
# validates them as a cuda run would be, without a GPU), then write metrics
# with closed-form losses and step times:
#   loss(step) = 10 − 0.01·step (+ 0.0001·step from the "drift" bundle)
#   ms = 100 (old) or 80 (new and drift)
# so each pair must read old 100.00, new 80.00, 1.250x, and bit-identical
# losses with the same sum (the 12 losses: 120 − 0.01·78 = 119.22) against
# the new bundle; against the drift one a largest difference of 1.20e-03
# (step 12), a mean of 6.50e-04 (0.0001 · 78 / 12) and final losses 9.8800
# and 9.8812. A missing
# OLD, a missing bundle and an unknown case must stop the script (exit 2).
set -euo pipefail
script="$1" train="$2"
train="$(cd "$(dirname "$train")" && pwd)/$(basename "$train")"
export TMPDIR="${TEST_TMPDIR:-$(mktemp -d)}"

source "$(dirname "$script")/fake_bundle.sh"
fake() {  # folder ms loss-offset
  fake_bundle "$1" "$train" "
with open(sys.argv[1], 'w') as f:
    for step in range(1, int(s['train.steps']) + 1):
        f.write(json.dumps({'step': step, 'loss': 10 - 0.01 * step + $3, 'ms': $2,
                            'mfu': 0.5}) + '\\n')"
}
fake "$TMPDIR/old" 100.0 0
fake "$TMPDIR/new" 80.0 0
fake "$TMPDIR/drift" 80.0 "0.0001 * step"
export OUT="$TMPDIR/out"
rm -rf "$OUT"

log="$TMPDIR/ab.log"
if ! OLD="$TMPDIR/old" NEW="$TMPDIR/new" CASES="g124 g1p3 moeb" STEPS=12 SHORT_STEPS=12 PAIRS=2 \
    bash "$script" > "$log" 2>&1; then
  cat "$log"; echo "ab_steps.sh failed"; exit 1
fi
cat "$log"
want() {  # count pattern log
  local n; n="$(grep -c -- "$2" "$3" || true)"
  [[ "$n" == "$1" ]] || { echo "expected $1 lines with '$2' in $3, got $n"; exit 1; }
}
want 6 'old 100.00 ms, new 80.00 ms (1.250x; new MFU 50.0 %); losses bit-identical (sum 119.220000)' "$log"
want 3 '^=== ' "$log"
want 0 '^FAIL' "$log"
# What each run was asked for (its log holds the settings the fake was given).
L="$OUT/ab_steps"
grep -q 'optim.lr=2e-4,optim.min_lr=2e-5' "$L/g1p3_new2.log" || { echo "g1p3: not GPT-3's 1.3B rate"; exit 1; }
grep -q 'model.moe.aux_loss_coeff=0.01' "$L/moeb_old1.log" || { echo "moeb: no balancing losses"; exit 1; }
grep -q 'train.precision=bf16,train.steps=12' "$L/g124_old1.log" || { echo "g124: settings"; exit 1; }

# Another binary whose losses move: the difference, not "identical"; EXTRA reaches every run.
log2="$TMPDIR/ab2.log"
OLD="$TMPDIR/old" NEW="$TMPDIR/drift" STEPS=12 PAIRS=1 EXTRA="train.attention=flash" \
  bash "$script" > "$log2" 2>&1 || { cat "$log2"; echo "ab_steps.sh (drift) failed"; exit 1; }
cat "$log2"
want 1 'losses differ: max |d| 1.20e-03, mean |d| 6.50e-04 over 12 steps; final 9.8800 (old) and 9.8812 (new)' "$log2"
want 0 'bit-identical' "$log2"
grep -q 'train.attention=flash' "$L/g124_new1.log" || { echo "EXTRA did not reach the run"; exit 1; }

# Bad arguments stop the script (exit 2).
for bad in "OLD=" "OLD=$TMPDIR/none" "CASES=nope"; do
  rc=0
  env OLD="$TMPDIR/old" NEW="$TMPDIR/new" "$bad" bash "$script" > "$TMPDIR/bad.log" 2>&1 || rc=$?
  [[ $rc == 2 ]] || { cat "$TMPDIR/bad.log"; echo "$bad: exit $rc, want 2"; exit 1; }
done
echo ok
