#!/usr/bin/env bash
# Soak (not in CI): gpt_tiny (4 ranks as threads, TP2·GTP2) for --steps steps,
# checkpointing every --every steps, SIGKILLed at random points (about every
# --kill_every steps, seeded) and resumed in place each time until it
# finishes; then its final checkpoint is compared bit for bit with an
# uninterrupted run's: every rank_*.bin (weights and optimizer state) and
# the weights exported as safetensors (tools/ckpt export).
#
#   soak.sh <train> <ckpt> [--steps 2000] [--every 100] [--kill_every 300]
#           [--seed S] [--out DIR] [--set k=v,...]
#
# Prints each kill (step, extra delay) and a summary line; exits 1 when the
# final weights differ, a run fails other than by the kill, or a run hangs.
set -uo pipefail
train="$(realpath "$1")" ckpt="$(realpath "$2")"; shift 2
steps=2000 every=100 kill_every=300 seed=$(( $(date +%s) % 100000 )) out="" extra=""
while (( $# )); do
  case "$1" in
    --steps) steps="$2"; shift 2 ;;
    --every) every="$2"; shift 2 ;;
    --kill_every) kill_every="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --set) extra=",$2"; shift 2 ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
done
out="${out:-$(mktemp -d)}"; mkdir -p "$out"
RANDOM=$seed
echo "soak: $steps steps, checkpoint every $every, a kill about every $kill_every steps, seed $seed, in $out"
set_args="train.steps=$steps,train.log_every=1,checkpoint.every=$every$extra"
start=$(date +%s)
# The last step a log reports.
last_step() { grep -oE '^step +[0-9]+' "$1" 2>/dev/null | tail -1 | awk '{ print $2 }'; }
# Generous limit for one run: 2 s a step.
limit=$(( 60 + 2 * steps ))

# 1. The uninterrupted reference.
rm -rf "$out/ref"
timeout "$limit" "$train" --run_dir "$out/ref" --set "$set_args" > "$out/ref.log" 2>&1 ||
  { echo "soak: the reference run failed:"; tail -20 "$out/ref.log"; exit 1; }
echo "soak: reference done in $(( $(date +%s) - start )) s"

# 2. The same run, killed and resumed.
rm -rf "$out/soak"
kills=0 runs=0 next=$(( kill_every / 2 + RANDOM % kill_every ))
while true; do
  runs=$(( runs + 1 ))
  log="$out/soak.$runs.log"
  "$train" --run_dir "$out/soak" --set "$set_args" > "$log" 2>&1 &
  pid=$!
  resumed=$(last_step "$log"); t0=$(date +%s) killed=0
  while kill -0 $pid 2>/dev/null; do
    s=$(last_step "$log"); s=${s:-0}
    if (( next <= steps && s >= next )); then
      delay_ms=$(( RANDOM % 400 ))  # anywhere in a step, saves included
      sleep "0.$(printf '%03d' $delay_ms)"
      kill -KILL $pid 2>/dev/null && killed=1
      echo "soak: kill $(( kills + 1 )) at step $s + ${delay_ms} ms (run $runs)"
      kills=$(( kills + 1 )) next=$(( next + kill_every / 2 + RANDOM % kill_every ))
      break
    fi
    if (( $(date +%s) - t0 > limit )); then
      echo "soak: run $runs hangs (step $s after $limit s)"; kill -KILL $pid; exit 1
    fi
    sleep 0.05
  done
  wait $pid 2>/dev/null; rc=$?
  if (( killed )); then continue; fi
  if (( rc != 0 )); then echo "soak: run $runs failed (exit $rc):"; tail -20 "$log"; exit 1; fi
  break
done
echo "soak: $kills kills, $runs runs, done in $(( $(date +%s) - start )) s"
grep -h "resum" "$out"/soak.*.log | sort | uniq -c | sed 's/^/soak:   /' | head -20

# 3. Bit for bit: the final checkpoint's data files and exported weights.
final=$(printf 'iter_%07d' "$steps")
bad=0
for f in "$out/ref/checkpoints/$final"/rank_*.bin; do
  cmp -s "$f" "$out/soak/checkpoints/$final/$(basename "$f")" ||
    { echo "soak: $(basename "$f") differs"; bad=1; }
done
for r in ref soak; do
  "$ckpt" export --format safetensors "$out/$r/checkpoints/$final" "$out/$r.safetensors" > /dev/null ||
    { echo "soak: export of $r failed"; bad=1; }
done
cmp "$out/ref.safetensors" "$out/soak.safetensors" || bad=1
# The losses too (printed with 4 decimals; a first difference names the step).
diff <(grep -hoE '"step": [0-9]+, "loss": [0-9.e-]+' "$out/ref/metrics.jsonl") \
     <(grep -hoE '"step": [0-9]+, "loss": [0-9.e-]+' "$out/soak/metrics.jsonl" | sort -t: -k2 -n -u) \
     > "$out/loss.diff" || echo "soak: (metrics.jsonl differ; see $out/loss.diff: resumed runs rewrite steps after the checkpoint)"
n=$(ls "$out/ref/checkpoints/$final"/rank_*.bin | wc -l)
if (( bad )); then echo "soak: FAILED: the final weights differ from the uninterrupted run's"; exit 1; fi
echo "soak: ok: after $kills kills and $runs runs, step $steps's $n rank files and the exported weights" \
     "equal the uninterrupted run's bit for bit ($(( $(date +%s) - start )) s)"
