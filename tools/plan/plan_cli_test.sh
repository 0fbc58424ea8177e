#!/bin/bash
# tools/plan end to end: predict (text and CSV), search, scale, calibrate on
# the CPU, and the refusals (exit 1 with one line naming the input).
set -euo pipefail
PLAN=tools/plan/plan
TMP=${TEST_TMPDIR:-$(mktemp -d)}
H200=plan/clusters/h200.cluster

out=$($PLAN predict --recipe tools/plan/llama70b.pbtxt --cluster $H200 \
  --set parallel.tp=8,parallel.tp_num_weight_shards=16,parallel.pp=2,parallel.sequence_parallel=true)
echo "$out"
grep -q "UNCALIBRATED" <<<"$out"
grep -q "gtp weight all-gather" <<<"$out"
grep -q "memory per GPU" <<<"$out"

# fp8 (the flag or the recipe's train.precision) is said to be a what-if; bf16 is not.
for how in "--fp8_gemm" "--set train.precision=fp8"; do
  out=$($PLAN predict --recipe tools/plan/llama70b.pbtxt --cluster $H200 $how)
  grep -q "^fp8: a what-if" <<<"$out" || { echo "$how: no what-if line"; exit 1; }
done
if $PLAN predict --recipe tools/plan/llama70b.pbtxt --cluster $H200 | grep -q "what-if"; then
  echo "bf16 called a what-if"; exit 1
fi

csv=$($PLAN predict --csv --recipe tools/plan/llama70b.pbtxt --cluster $H200 --set parallel.tp=8,parallel.tp_num_weight_shards=8)
[ "$(wc -l <<<"$csv")" = 2 ]
grep -q "^label,world,tp,gtp" <<<"$csv"

out=$($PLAN search --recipe tools/plan/llama70b.pbtxt --cluster $H200 --world 64 --top 5)
grep -q "recommended:" <<<"$out"
grep -q "runner-up" <<<"$out"

out=$($PLAN scale --recipe tools/plan/llama70b.pbtxt --cluster $H200 --worlds 64,128 --families gtp,tpdp --sequences_per_gpu 4)
[ "$(wc -l <<<"$out")" = 5 ]

$PLAN calibrate --device cpu --quick --out "$TMP/cpu.calibration"
grep -q "^gemm f32" "$TMP/cpu.calibration"
out=$($PLAN predict --recipe tools/plan/gpt_megatron2021.pbtxt --cluster $H200 --calibration "$TMP/cpu.calibration" \
  --set train.precision=f32)
grep -q "calibrated (measured table)" <<<"$out"

# Refusals: exit 1, one line naming the input.
set +e
msg=$($PLAN predict --recipe tools/plan/llama70b.pbtxt --cluster $H200 --set parallel.tp=3 2>&1); rc=$?
[ $rc = 1 ] && grep -q "not divisible by tp × gtp × cp × pp = 3" <<<"$msg" || { echo "tp=3: rc=$rc $msg"; exit 1; }
printf 'name = x\nbogus = 1\n' > "$TMP/bad.cluster"
msg=$($PLAN predict --recipe tools/plan/llama70b.pbtxt --cluster "$TMP/bad.cluster" 2>&1); rc=$?
[ $rc = 1 ] && grep -q "unknown cluster key 'bogus'" <<<"$msg" || { echo "bad cluster: rc=$rc $msg"; exit 1; }
msg=$($PLAN predict --recipe tools/plan/llama70b.pbtxt --cluster $H200 --cluster_set network_gbps=0 2>&1); rc=$?
[ $rc = 1 ] && grep -q "network_gbps" <<<"$msg" || { echo "zero bw: rc=$rc $msg"; exit 1; }
$PLAN frobnicate >/dev/null 2>&1; [ $? = 2 ] || { echo "unknown command should exit 2"; exit 1; }
# A flag the command does not read is refused (exit 2), not ignored.
msg=$($PLAN predict --recipe tools/plan/llama70b.pbtxt --cluster $H200 --world 64 2>&1); rc=$?
[ $rc = 2 ] && grep -q "plan predict: --world is for search only" <<<"$msg" || { echo "predict --world: rc=$rc $msg"; exit 1; }
msg=$($PLAN search --recipe tools/plan/llama70b.pbtxt --cluster $H200 --world -3 2>&1); rc=$?
[ $rc = 2 ] && grep -q "world .* is out of range" <<<"$msg" || { echo "search --world -3: rc=$rc $msg"; exit 1; }
msg=$($PLAN calibrate --device cpu --quick --out "$TMP/x.cal" --set model.n_layer=2 2>&1); rc=$?
[ $rc = 2 ] && grep -q "calibrate reads none" <<<"$msg" || { echo "calibrate --set: rc=$rc $msg"; exit 1; }
msg=$($PLAN predict --csv --json --recipe tools/plan/llama70b.pbtxt --cluster $H200 2>&1); rc=$?
[ $rc = 2 ] && grep -q "not both" <<<"$msg" || { echo "--csv --json: rc=$rc $msg"; exit 1; }
echo PASS
