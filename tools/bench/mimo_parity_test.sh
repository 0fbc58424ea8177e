#!/usr/bin/env bash
# mimo_parity.sh end to end on the CPU (UCX processes under gtprun): every
# MIMO cell matches one rank within its tolerance, and the comparison can
# fail (a tolerance below the measured reordering turns cells red).
set -euo pipefail
vlm="$1" gtprun="$2" script="$3"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
export VLM="$vlm" GTPRUN="$gtprun" DEVICE=cpu STEPS=4 TMPDIR="$tmp"
fail() { echo "FAIL: $*"; exit 1; }
bash "$script" > "$tmp/p.txt" 2>&1 || { cat "$tmp/p.txt"; fail "mimo_parity on the CPU"; }
cat "$tmp/p.txt"
for c in disjoint fan_in fan_out tp2gtp2 colocated; do
  grep -qE "^\| $c \(.* \| f32 \| 4 \| .* \| PASS \|" "$tmp/p.txt" || fail "$c not PASS over 4 steps"
done
grep -q "parity: 5 PASS, 0 FAIL, 0 SKIP" "$tmp/p.txt" || fail "summary"
# The TP2·GTP2 language model sums in another order than one rank (measured
# ~1e-6 relative): with a 1e-9 tolerance that cell must FAIL.
if TOL=1e-9 CELLS="tp2gtp2" bash "$script" > "$tmp/f.txt" 2>&1; then
  cat "$tmp/f.txt"; fail "a 1e-9 tolerance passed"
fi
grep -qE "^\| tp2gtp2 .* \| FAIL \|" "$tmp/f.txt" || { cat "$tmp/f.txt"; fail "no FAIL row"; }
echo ok
