#!/usr/bin/env bash
# Checkpoint faults on gpt_tiny (4 ranks as threads, TP2·GTP2):
#   kill:   SIGKILL the trainer at a random point of a save (strace fault
#           injection at the k-th fsync/rename/unlink; saves every step)
#           -> `latest` names a complete checkpoint, and resuming in place
#           (next to the killed save's leftovers) gives the uninterrupted
#           run's losses for the next 3 steps;
#   damage: flip one random byte of a data file, or truncate any file, of a good
#           checkpoint -> the trainer refuses with an error naming that file
#           and never trains from it;
#   full:   the run directory on a small tmpfs, so the second save runs out
#           of space -> a clear error, and the first checkpoint is intact
#           (`latest` names it and it resumes exactly). Resumes use the same
#           train.steps as the reference (the LR schedule depends on it). Skipped, with the
#           reason, when a tmpfs cannot be mounted (not root, sandbox).
#
#   checkpoint_fault_test.sh <train> [--kill_trials N] [--damage_trials N]
#                            [--metadata_flips N] [--seed S]
# --metadata_flips adds N trials flipping a byte of metadata.pb (its CRC-32
# trailer must catch every one; 4 by default).
set -uo pipefail
bin="$(realpath "$1")"; shift
kill_trials=4 damage_trials=8 metadata_flips=4 seed=$(( $(date +%s) % 100000 ))
while (( $# )); do
  case "$1" in
    --kill_trials) kill_trials="$2"; shift 2 ;;
    --damage_trials) damage_trials="$2"; shift 2 ;;
    --metadata_flips) metadata_flips="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
done
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
RANDOM=$seed
echo "checkpoint faults: $kill_trials kill trials, $damage_trials damage trials, $metadata_flips metadata flips, seed $seed"
small="model.n_layer=2,model.seq_len=32,train.micro_batch=2,train.global_batch=8,train.log_every=1,train.eval_every=0,optim.warmup_steps=3"
steps=40
losses() { grep -o '"step": [0-9]*, "loss": [0-9.]*' "$1" | sed 's/"step": \([0-9]*\), "loss": \(.*\)/\1 \2/'; }
# Steps $3..$4 of metrics $2 match the reference $1 (f32 tolerance).
match() {
  paste <(losses "$1" | awk -v a="$3" -v b="$4" '$1 >= a && $1 <= b') \
        <(losses "$2" | awk -v a="$3" -v b="$4" '$1 >= a && $1 <= b') |
    awk -v n=$(( $4 - $3 + 1 )) '{ d = $2 - $4; if (d < 0) d = -d;
                                   if ($1 != $3 || d > 2e-5 * $2) { print "  step " $1 " " $2 " vs " $3 " " $4; bad = 1 }; c++ }
                                 END { if (c != n) { print "  " c " of " n " steps"; bad = 1 }; exit bad }'
}
fails=0 hangs=0 lost=0

# Reference: uninterrupted, with checkpoints at 12 and 24 for the damage trials.
"$bin" --run_dir "$tmp/ref" --set "$small,train.steps=$steps,checkpoint.every=12,checkpoint.keep_last=10" \
  > "$tmp/ref.log" 2>&1 || { echo "reference run failed"; cat "$tmp/ref.log"; exit 1; }

# ---- kill during save ----
mid_save=0
strace="$(command -v strace || true)"
[ -n "$strace" ] || echo "(no strace: killing at random times instead, which rarely lands inside a save)"
for (( t = 0; t < kill_trials; ++t )); do
  dir="$tmp/kill_$t"; rm -rf "$dir"
  run=("$bin" --run_dir "$dir" --set "$small,train.steps=$steps,checkpoint.every=1,checkpoint.keep_last=2")
  if [ -n "$strace" ]; then
    # SIGKILL at the k-th fsync / rename / unlink of one thread: a random
    # point inside a save (each rank's thread fsyncs its file; rank 0
    # renames and removes old checkpoints).
    case $(( RANDOM % 3 )) in
      0) sys=fsync; k=$(( 1 + RANDOM % (2 * steps) )) ;;
      1) sys=rename; k=$(( 1 + RANDOM % (3 * steps) )) ;;
      2) sys=unlinkat; k=$(( 1 + RANDOM % steps )) ;;
    esac
    what="kill trial $t (SIGKILL at a thread's ${sys} #$k)"
    "$strace" -f -o /dev/null -e trace=$sys -e inject=$sys:signal=KILL:when=$k "${run[@]}" > "$dir.log" 2>&1 &
    wait $! 2> /dev/null  # (in the background: no "Killed" job message)
  else
    delay_ms=$(( RANDOM % 1200 ))
    what="kill trial $t (SIGKILL at first step + ${delay_ms} ms)"
    "${run[@]}" > "$dir.log" 2>&1 &
    pid=$!
    for (( i = 0; i < 200; ++i )); do grep -qs "step .*loss" "$dir.log" && break; sleep 0.05; done
    sleep "$(printf '%d.%03d' $(( delay_ms / 1000 )) $(( delay_ms % 1000 )))"
    kill -KILL $pid 2>/dev/null; wait $pid 2>/dev/null
  fi
  ck="$dir/checkpoints"
  n=$(cat "$ck/latest" 2>/dev/null | tr -d '\n')
  # Killed between publishing the directory and renaming latest.tmp: the
  # directory is complete and latest.tmp names it (checkpoint::LatestIteration
  # resumes from it).
  if [ -z "$n" ] && [ -f "$ck/latest.tmp" ] && [ "$(tail -c1 "$ck/latest.tmp" | od -An -c | tr -d ' ')" = '\n' ]; then
    pending=$(tr -d '\n' < "$ck/latest.tmp")
    [ -f "$ck/$(printf 'iter_%07d' "$pending")/metadata.pb" ] && n="$pending"
  fi
  tmps=$(ls -d "$ck"/*.tmp 2>/dev/null | wc -l)
  (( tmps > 0 )) && mid_save=$((mid_save + 1))
  if [ -z "$n" ] && ! ls -d "$ck"/iter_* 2>/dev/null | grep -qv '\.tmp$'; then
    # Killed in the first save: there is no previous checkpoint to keep,
    # and a restart must start over (ignoring the unfinished save).
    mv "$dir/metrics.jsonl" "$dir/metrics.killed.jsonl" 2>/dev/null
    if timeout 60 "${run[@]}" > "$dir.resume.log" 2>&1 && ! grep -q "resumed from" "$dir.resume.log" &&
       out=$(match "$tmp/ref/metrics.jsonl" "$dir/metrics.jsonl" 1 $steps); then
      echo "$what: ok, killed in the first save ($tmps unfinished save dir(s)); the restart starts over and matches"
    else
      echo "$what: FAIL: restart after a kill in the first save"; echo "${out:-}"; tail -3 "$dir.resume.log"; fails=$((fails + 1))
    fi
    continue
  fi
  if [ -z "$n" ] || [ ! -f "$ck/$(printf 'iter_%07d' "$n")/metadata.pb" ]; then
    echo "$what: FAIL: latest='$n' does not name a complete checkpoint"; ls -la "$ck"; fails=$((fails + 1)); lost=$((lost + 1)); continue
  fi
  if grep -q "^done:" "$dir.log"; then echo "$what: the run finished first (latest $n), not counted"; continue; fi
  mv "$dir/metrics.jsonl" "$dir/metrics.killed.jsonl"
  if ! timeout 60 "$bin" --run_dir "$dir" --set "$small,train.steps=$steps,checkpoint.every=1,checkpoint.keep_last=2" > "$dir.resume.log" 2>&1; then
    echo "$what: FAIL: resume from $n failed"; tail -5 "$dir.resume.log"; fails=$((fails + 1)); continue
  fi
  if ! grep -q "resumed from .*iter_$(printf '%07d' "$n") at step $n" "$dir.resume.log" ||
     ! out=$(match "$tmp/ref/metrics.jsonl" "$dir/metrics.jsonl" $(( n + 1 )) $steps); then
    echo "$what: FAIL: resume from $n does not continue the run"; echo "${out:-}"; grep resumed "$dir.resume.log"
    fails=$((fails + 1)); lost=$((lost + 1)); continue
  fi
  echo "$what: ok, latest $n complete ($tmps unfinished save dir(s) left), steps $(( n + 1 ))..$steps match"
done
echo "kill during save: $kill_trials trials, $mid_save of them killed mid-save (an iter_*.tmp left)"

# ---- damaged files ----
good="$tmp/ref/checkpoints/iter_0000012"
files=(metadata.pb rank_00000.bin rank_00001.bin rank_00002.bin rank_00003.bin)
undetected=0 misnamed=0
for (( t = 0; t < damage_trials + metadata_flips; ++t )); do
  dir="$tmp/damage_$t"; rm -rf "$dir"; mkdir -p "$dir/checkpoints"
  cp -r "$good" "$dir/checkpoints/"; echo 12 > "$dir/checkpoints/latest"
  f="${files[$(( RANDOM % ${#files[@]} ))]}"
  trunc=$(( RANDOM % 2 ))
  # The first damage_trials trials pick any file, then metadata_flips flip
  # a byte of metadata.pb (checked by its CRC-32 trailer).
  (( t >= damage_trials )) && { f=metadata.pb; trunc=0; }
  path="$dir/checkpoints/iter_0000012/$f"
  size=$(stat -c %s "$path")
  off=$(( (RANDOM * 32768 + RANDOM) % size ))
  if (( trunc )); then
    how="truncated to $off of $size bytes"; truncate -s "$off" "$path"
  else
    old=$(od -An -tu1 -j "$off" -N1 "$path" | tr -d ' ')
    x=$(( 1 << (RANDOM % 8) ))
    how="byte $off of $size flipped ($old ^ $x)"
    printf "$(printf '\\%03o' $(( old ^ x )))" | dd of="$path" bs=1 seek="$off" conv=notrunc status=none
  fi
  what="damage trial $t: $f $how"
  timeout 60 "$bin" --run_dir "$dir" --set "$small,train.steps=$steps" > "$dir.log" 2>&1; rc=$?
  if (( rc == 124 )); then echo "$what: FAIL: hang"; hangs=$((hangs + 1)); fails=$((fails + 1)); continue; fi
  trained=$(losses "$dir/metrics.jsonl" 2>/dev/null | wc -l)
  if (( rc == 0 || trained > 0 )); then
    echo "$what: FAIL: trained from it (exit $rc, $trained steps)"; undetected=$((undetected + 1)); fails=$((fails + 1)); continue
  fi
  if ! grep -q "$f" "$dir.log"; then
    echo "$what: FAIL: the error does not name $f: $(grep -m1 '^error' "$dir.log" | cut -c1-200)"
    misnamed=$((misnamed + 1)); fails=$((fails + 1)); continue
  fi
  echo "$what: ok, refused: $(grep -m1 "$f" "$dir.log" | cut -c1-200)"
done

# ---- disk full ----
full="$tmp/full"; mkdir -p "$full"
if ! mount -t tmpfs -o size=2200k tmpfs "$full" 2> "$tmp/mount.err"; then
  echo "disk full: SKIPPED (cannot mount a tmpfs: $(cat "$tmp/mount.err"))"
else
  trap 'umount "$full" 2>/dev/null' EXIT
  timeout 60 "$bin" --run_dir "$full/run" --set "$small,train.steps=$steps,checkpoint.every=4,checkpoint.keep_last=2" > "$tmp/full.log" 2>&1; rc=$?
  n=$(cat "$full/run/checkpoints/latest" 2>/dev/null | tr -d '\n')
  if (( rc == 0 )); then
    echo "disk full: FAIL: the run succeeded on a full disk?"; fails=$((fails + 1))
  elif (( rc == 124 )); then
    echo "disk full: FAIL: hang"; hangs=$((hangs + 1)); fails=$((fails + 1))
  elif ! grep -qi "no space left" "$tmp/full.log"; then
    echo "disk full: FAIL: unclear error:"; tail -3 "$tmp/full.log"; fails=$((fails + 1))
  elif [ "$n" != 4 ]; then
    echo "disk full: FAIL: latest is '$n', not the complete checkpoint 4"; fails=$((fails + 1)); lost=$((lost + 1))
  else
    mkdir -p "$tmp/after_full/checkpoints"; cp -r "$full/run/checkpoints/iter_0000004" "$tmp/after_full/checkpoints/"
    echo 4 > "$tmp/after_full/checkpoints/latest"
    if "$bin" --run_dir "$tmp/after_full" --set "$small,train.steps=$steps" > "$tmp/after_full.log" 2>&1 &&
       out=$(match "$tmp/ref/metrics.jsonl" "$tmp/after_full/metrics.jsonl" 5 $steps); then
      echo "disk full: ok, exit $rc: $(grep -i -m1 "no space left" "$tmp/full.log" | cut -c1-200); checkpoint 4 intact, steps 5..$steps match"
    else
      echo "disk full: FAIL: checkpoint 4 does not resume exactly"; echo "${out:-}"; tail -3 "$tmp/after_full.log"; fails=$((fails + 1)); lost=$((lost + 1))
    fi
  fi
  umount "$full"; trap - EXIT
fi
echo "checkpoint faults: $fails failed ($hangs hangs, $lost lost or wrong checkpoints, $undetected damaged checkpoints trained from, $misnamed refused without naming the damaged file)"
(( fails == 0 ))
