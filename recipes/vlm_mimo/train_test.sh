#!/usr/bin/env bash
# recipes/vlm_mimo end to end on its default 8-rank layout (encoder TP1·DP4 |
# language TP2·GTP2), as threads:
#   - it learns from the images: in 300 of the recipe's steps the caption
#     loss falls far below what a model blind to the images can reach
#     (log(2·6·4)/5 = 0.774 nats per predicted position; one that reads only
#     colour and size: log(4)/5 = 0.277) and the size and colour of unseen
#     images are read (chance 50% and 17%); metrics.jsonl holds every step
#     and the caption accuracy;
#   - --set, --list_settings, "did you mean", the old flags named, preflight
#     refusals naming the setting (and leaving no run directory);
#   - a run directory belongs to one run (a second is refused);
#   - Ctrl-C saves a checkpoint, and a run killed without one resumes from
#     its last periodic checkpoint: both continue with bit-identical losses,
#     learning rates and grad norms to a run never interrupted.
set -euo pipefail
train="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
cd "$tmp"
fail() { echo "FAIL: $*"; exit 1; }

# --- settings ---------------------------------------------------------------
"$train" --list_settings > list.txt || fail "--list_settings"
grep -q '^parallel.language.tp=2  (int32)  tensor parallelism' list.txt || { cat list.txt; fail "list_settings"; }
grep -q '^optim.matrices="muon"  (string: adamw | muon)' list.txt || fail "list_settings choices"
"$train" --list_settings --set train.steps=7,parallel.colocated=true | grep -q '^train.steps=7 ' ||
  fail "--set not applied"
rc=0; "$train" --set train.stepz=3 > err.txt 2>&1 || rc=$?
[[ $rc == 1 ]] && grep -q "no such setting (did you mean train.steps?)" err.txt || { cat err.txt; fail "did you mean"; }
rc=0; "$train" --steps=30 > err.txt 2>&1 || rc=$?
[[ $rc == 2 ]] && grep -q -- "--steps=30 is now --set train.steps=30" err.txt || { cat err.txt; fail "old flag"; }
# Refused before anything is written, naming the setting.
expect_refused() {  # message sets
  local rc=0
  "$train" --run_dir refused --set "$2" > err.txt 2>&1 || rc=$?
  [[ $rc == 1 ]] && grep -qF "$1" err.txt || { cat err.txt; fail "refusal '$1' (rc $rc)"; }
  [[ ! -e refused ]] || fail "a refused run left refused/"
}
expect_refused "parallel.language.tp (3) must divide model.heads (4)" parallel.language.tp=3
expect_refused "parallel.language.tp × parallel.language.gtp = 4 must divide parallel.language.ranks (6)" \
  parallel.language.ranks=6
expect_refused "train.global_batch (6) must be divisible by the encoder grid's 4 data lanes" train.global_batch=6
expect_refused "parallel.colocated needs parallel.encoder.ranks (4) = parallel.language.ranks (2)" \
  parallel.colocated=true,parallel.language.ranks=2,parallel.language.gtp=1
expect_refused "optim.matrices must be adamw or muon, got moun (did you mean muon?)" optim.matrices=moun

# --- it learns ----------------------------------------------------------------
"$train" --run_dir learn --set train.steps=300,train.log_every=50,train.eval_batches=2 > learn.log 2>&1 ||
  { cat learn.log; fail "300 steps"; }
cat learn.log
[[ "$(grep -c '"loss"' learn/metrics.jsonl)" == 300 ]] || fail "metrics.jsonl lacks steps"
python3 - learn/metrics.jsonl <<'PY' || fail "learning"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
last = [r for r in rows if r.get("step") == 300 and "loss" in r][0]
for k in ("lr", "grad_norm", "ms", "tokens_per_s", "skipped"):
    assert k in last, k
assert last["loss"] < 0.35, f"loss {last['loss']} is not far below the image-blind 0.774"
cap = [r for r in rows if "caption_colour" in r]
assert cap and cap[-1]["step"] == 300 and cap[-1]["caption_images"] == 64, cap
assert cap[-1]["caption_colour"] > 0.9, f"colour accuracy {cap[-1]['caption_colour']} (chance 1/6)"
assert cap[-1]["caption_size"] > 0.9, f"size accuracy {cap[-1]['caption_size']} (chance 1/2)"
print("learns: loss", last["loss"], "captions", cap[-1])
PY
grep -q '^captions of 64 unseen images' learn.log || fail "no caption line"
grep -q '^checkpoint: step 300 saved to learn/checkpoints' learn.log || fail "final checkpoint"
grep -q 'nothing to train' <("$train" --run_dir learn --set train.steps=300 2>&1) || fail "rerun of a finished run"

# --- interrupted runs resume with the same numbers ----------------------------
small="train.steps=40,train.log_every=10,train.eval_batches=0,checkpoint.every=5,checkpoint.keep_last=3"
"$train" --run_dir whole --set "$small" > whole.log 2>&1 || { cat whole.log; fail "uninterrupted run"; }
[[ "$(ls -d whole/checkpoints/iter_* | wc -l)" == 3 ]] || { ls whole/checkpoints; fail "keep_last=3"; }
# Waits until a run has written at least $2 step lines.
wait_steps() {
  for _ in $(seq 1 1200); do
    [[ -f "$1/metrics.jsonl" && "$(grep -c '"loss"' "$1/metrics.jsonl")" -ge "$2" ]] && return 0
    sleep 0.05
  done
  fail "$1 did not reach step $2"
}
# Ctrl-C: a checkpoint at the step boundary, exit 0; meanwhile the run
# directory refuses a second run.
"$train" --run_dir sigint --set "$small" > sigint1.log 2>&1 &
pid=$!
wait_steps sigint 8
rc=0; "$train" --run_dir sigint --set "$small" > second.log 2>&1 || rc=$?
[[ $rc == 1 ]] && grep -q "run directory sigint is in use by another run (pid $pid" second.log ||
  { cat second.log; fail "a second run on a busy run directory"; }
kill -INT "$pid"
wait "$pid" || { cat sigint1.log; fail "Ctrl-C exit status"; }
grep -q "stopped by signal after step" sigint1.log || { cat sigint1.log; fail "not stopped by the signal"; }
"$train" --run_dir sigint --set "$small" > sigint2.log 2>&1 || { cat sigint2.log; fail "resume after Ctrl-C"; }
grep -q "resumed from sigint/checkpoints/iter_" sigint2.log || { cat sigint2.log; fail "no resume"; }
# A crash (SIGKILL): back to the last periodic checkpoint; the lines of the
# steps after it are dropped from metrics.jsonl and run again.
"$train" --run_dir killed --set "$small" > killed1.log 2>&1 &
pid=$!
wait_steps killed 13
kill -KILL "$pid"
wait "$pid" 2>/dev/null || true
"$train" --run_dir killed --set "$small" > killed2.log 2>&1 || { cat killed2.log; fail "resume after a kill"; }
grep -q "resumed from killed/checkpoints/iter_" killed2.log || { cat killed1.log killed2.log; fail "no resume"; }
# A resume that would change the schedule is refused, naming the setting.
rc=0; "$train" --run_dir whole --set "$small,train.steps=50" > err.txt 2>&1 || rc=$?
[[ $rc == 1 ]] && grep -q "set optim.decay_steps=40" err.txt || { cat err.txt; fail "schedule change"; }
python3 - whole/metrics.jsonl sigint/metrics.jsonl killed/metrics.jsonl <<'PY' || fail "resumed numbers differ"
import json, sys
def steps(p):
    out = {}
    for l in open(p):
        r = json.loads(l)
        if "loss" in r:
            assert r["step"] not in out, f"{p}: step {r['step']} twice"
            out[r["step"]] = (r["loss"], r["lr"], r["grad_norm"])
    return out
whole = steps(sys.argv[1])
assert sorted(whole) == list(range(1, 41)), sorted(whole)
for p in sys.argv[2:]:
    other = steps(p)
    assert other == whole, f"{p}: " + str([(s, whole[s], other.get(s)) for s in whole if other.get(s) != whole[s]][:3])
print("resumed runs: 40 steps bit-identical to the uninterrupted run")
PY
echo ok
