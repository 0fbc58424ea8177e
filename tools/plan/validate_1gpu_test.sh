#!/bin/bash
# tools/plan/validate_1gpu.sh in its CPU mode (tiny shapes): it calibrates,
# trains the four bench kinds, predicts them and prints the table; every
# number must be finite and positive (the 10 % target is the GPU's). Then the
# refusals: --enforce with a tolerance nothing meets exits 1 saying NOT MET;
# an unknown shape exits 2.
set -euo pipefail
plan="$1" train="$2"
script=tools/plan/validate_1gpu.sh
export TMPDIR="${TEST_TMPDIR:-$(mktemp -d)}"
out="$TMPDIR/v"
bash "$script" --device cpu --plan "$plan" --train "$train" --out "$out" > "$TMPDIR/log" 2>&1 || { cat "$TMPDIR/log"; exit 1; }
cat "$TMPDIR/log"
[[ -s "$out/cpu.calibration" ]] || { echo "no calibration written"; exit 1; }
grep -q "^| shape | steps | measured ms/step | predicted ms/step | error % | measured peak GiB | predicted GiB | error % |" "$out/table.txt"
for shape in gpt124m gpt350m moe hybrid; do
  row="$(grep "^| $shape |" "$out/table.txt")" || { echo "no row for $shape"; exit 1; }
  # Columns: shape, steps, ms, predicted ms, err, GiB, predicted GiB, err.
  python3 - "$row" <<'PY'
import math, sys
cells = [c.strip() for c in sys.argv[1].strip().strip("|").split("|")]
steps, ms, pms, et, mg, pg, em = int(cells[1]), *map(float, cells[2:8])
assert steps == 6, cells
for v in (ms, pms, mg, pg):
    assert math.isfinite(v) and v > 0, cells
for e in (et, em):
    assert math.isfinite(e) and e > -100, cells
print("ok", cells[0])
PY
  python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); assert p["memory"]["allocator"] > 0 and p["step_s"] > 0' \
    "$out/$shape.prediction.json"
done
grep -q "cpu mode: table complete" "$out/table.txt"

set +e
bash "$script" --device cpu --plan "$plan" --train "$train" --out "$TMPDIR/w" --calibration "$out/cpu.calibration" \
  --shapes gpt124m --enforce --tol 0.0001 > "$TMPDIR/log2" 2>&1; rc=$?
[[ $rc == 1 ]] && grep -q "NOT MET: |error| > 0.0001 % for gpt124m" "$TMPDIR/log2" || { cat "$TMPDIR/log2"; echo "rc=$rc"; exit 1; }
bash "$script" --device cpu --plan "$plan" --train "$train" --out "$TMPDIR/x" --shapes nosuch > "$TMPDIR/log3" 2>&1; rc=$?
[[ $rc == 2 ]] && grep -q "unknown shape 'nosuch'" "$TMPDIR/log3" || { cat "$TMPDIR/log3"; echo "rc=$rc"; exit 1; }
echo PASS
