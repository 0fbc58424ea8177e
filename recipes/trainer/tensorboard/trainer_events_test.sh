#!/usr/bin/env bash
# train.tensorboard_dir end to end (issue 18), checked by an independent reader
# (read_events.py: its own CRC-32C and protobuf decoding):
#  1. gpt_tiny writes an event file whose scalars are exactly metrics.jsonl's
#     (every key, same step, same value up to float32 and the JSON's digits);
#     a resume adds a second file and its steps continue;
#  2. MoE with pipeline stages: the moe/* and bubble scalars too, absolute dir;
#  3. a flipped byte or a cut file fails the reader's CRC / framing checks;
#  4. off by default; an unusable directory is a one-line error naming it.
set -euo pipefail
gpt="$1"
moe="$2"
reader="$3"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
small="model.n_layer=2,model.seq_len=32,train.micro_batch=4,train.global_batch=8,train.log_every=1,optim.warmup_steps=2,checkpoint.every=0"
fail() { echo "FAIL: $*"; exit 1; }

# Every metrics.jsonl scalar at its step in the events of dir $2, and nothing else.
same_scalars() {  # metrics.jsonl, event dir
  python3 "$reader" --json "$2" > "$tmp/events.json"
  python3 - "$1" "$tmp/events.json" <<'PY'
import decimal, json, struct, sys
# metrics.jsonl key -> (TensorBoard tag, scale)
TAGS = {
    "loss": ("train/loss", 1), "val_loss": ("val/loss", 1), "lr": ("train/lr", 1),
    "grad_norm": ("train/grad_norm", 1), "skipped": ("train/skipped", 1),
    "ms": ("perf/step_ms", 1), "tokens_per_s": ("perf/tokens_per_s", 1), "mfu": ("perf/mfu", 1),
    "pipeline_bubble": ("perf/pipeline_bubble", 1), "comm_exposed_ms": ("comm/exposed_ms", 1),
    "mem_bytes": ("mem/in_use_gib", 2.0 ** -30), "peak_mem_bytes": ("mem/peak_gib", 2.0 ** -30),
}
for k in ("tokens_min", "tokens_mean", "tokens_max", "dropped", "aux_loss", "z_loss"):
    TAGS["moe_" + k] = ("moe/" + k, 1)
f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
want = {}  # (step, tag) -> (value, tolerance)
for line in open(sys.argv[1]):
    rec = json.loads(line, parse_float=decimal.Decimal)
    step = rec.pop("step")
    for key, v in rec.items():
        if key not in TAGS:
            sys.exit("metrics.jsonl key %r has no TensorBoard tag" % key)
        tag, scale = TAGS[key]
        if isinstance(v, bool):
            v, digits = float(v), 0.0
        elif isinstance(v, int):
            v, digits = v * scale, 0.0
        else:  # half a unit in the last printed digit
            digits = 0.5 * 10.0 ** v.as_tuple().exponent
            v = float(v)
        want[(step, tag)] = (f32(v), digits + abs(v) * 2.0 ** -23)
got = {}
for line in open(sys.argv[2]):
    e = json.loads(line)
    if "text" in e:  # the recipe (text plugin): checked by the caller
        continue
    got[(e["step"], e["tag"])] = e["value"]
bad = 0
for k, (v, tol) in sorted(want.items()):
    if k not in got:
        print("missing in the events: step %d %s" % k); bad += 1
    elif abs(got[k] - v) > tol:
        print("step %d %s: events %.9g, metrics.jsonl %.9g (tolerance %.3g)" % (k + (got[k], v, tol))); bad += 1
for k in sorted(set(got) - set(want)):
    print("in the events but not in metrics.jsonl: step %d %s" % k); bad += 1
tags = sorted({t for _, t in want})
print("%d scalars at %d steps compared: %s" % (len(want), len({s for s, _ in want}), " ".join(tags)))
sys.exit(1 if bad else 0)
PY
}

echo "== 1. gpt_tiny: the events hold metrics.jsonl; a resume adds a file"
set1="$small,train.eval_every=2,train.tensorboard_dir=tb,train.peak_tflops=0.001"
"$gpt" --run_dir "$tmp/run" --set "$set1,train.steps=4,optim.decay_steps=6" > "$tmp/run.log"
grep -q "^tensorboard: $tmp/run/tb/events.out.tfevents.[0-9]*\." "$tmp/run.log" || fail "banner has no event file: $(cat "$tmp/run.log")"
[ "$(ls "$tmp/run/tb" | wc -l)" = 1 ] || fail "want one event file: $(ls "$tmp/run/tb")"
same_scalars "$tmp/run/metrics.jsonl" "$tmp/run/tb"
grep -q '"mfu"' "$tmp/run/metrics.jsonl" || fail "no mfu in metrics.jsonl with train.peak_tflops"
grep -q '"val_loss"' "$tmp/run/metrics.jsonl" || fail "no validation loss"
sleep 1  # a new second: the usual name; the same second would add ".1"
"$gpt" --run_dir "$tmp/run" --set "$set1,train.steps=6" > "$tmp/resume.log"
grep -q "resumed from" "$tmp/resume.log" || fail "did not resume"
[ "$(ls "$tmp/run/tb" | grep -c tfevents)" = 2 ] || fail "a resume should add a second file: $(ls "$tmp/run/tb")"
same_scalars "$tmp/run/metrics.jsonl" "$tmp/run/tb"
second=$(ls "$tmp/run/tb" | sort | tail -1)
steps=$(python3 "$reader" "$tmp/run/tb/$second" | grep -v " recipe text: " | cut -d' ' -f1 | sort -un | tr '\n' ' ')
[ "$steps" = "5 6 " ] || fail "the resumed file holds steps '$steps', want '5 6 '"
# The resolved recipe, as TensorBoard's text plugin shows it: recipe.pbtxt's
# lines (its comment line aside) in a markdown code block, in each file.
python3 - "$reader" "$tmp/run/tb/$second" "$tmp/run/recipe.pbtxt" <<'PY' || fail "the recipe text in the events"
import json, subprocess, sys
out = subprocess.run([sys.executable, sys.argv[1], "--json", sys.argv[2]], check=True,
                     capture_output=True, text=True).stdout
texts = [json.loads(l) for l in out.splitlines() if '"text"' in l]
assert [(t["step"], t["tag"]) for t in texts] == [(0, "recipe")], texts
recipe = "".join(l for l in open(sys.argv[3]) if not l.startswith("#"))
assert texts[0]["text"] == "```\n" + recipe + "```\n", texts[0]["text"][:200]
print("recipe text: %d lines, as recipe.pbtxt" % recipe.count("\n"))
PY

if python3 -c "import tensorboard" 2> /dev/null; then  # TensorBoard's own reader agrees (the GPU machine)
  python3 "$reader" --tensorboard "$tmp/run/tb" > "$tmp/tb.txt"
  head -1 "$tmp/tb.txt"
  diff <(tail -n +2 "$tmp/tb.txt" | sort) <(python3 "$reader" "$tmp/run/tb" | grep -v " text: " | sort) \
    || fail "TensorBoard's EventAccumulator reads other scalars than read_events.py"
else
  echo "(no tensorboard package here: EventAccumulator not checked)"
fi

echo "== 2. MoE on 2 pipeline stages, absolute directory"
"$moe" --run_dir "$tmp/moe" --set "$small,train.steps=3,train.eval_every=0,train.global_batch=16,parallel.world_size=4,parallel.tp_num_weight_shards=1,parallel.pp=2,parallel.ep=2,parallel.expert_tp_num_weight_shards=1,train.tensorboard_dir=$tmp/moe_tb" > "$tmp/moe.log"
[ ! -e "$tmp/moe/$tmp" ] || fail "an absolute tensorboard_dir went under the run directory"
same_scalars "$tmp/moe/metrics.jsonl" "$tmp/moe_tb"
grep -q "moe/aux_loss" "$tmp/events.json" && grep -q "perf/pipeline_bubble" "$tmp/events.json" \
  || fail "no moe/* or bubble scalars"

echo "== 3. damage is detected"
file="$tmp/run/tb/$(ls "$tmp/run/tb" | sort | head -1)"
size=$(stat -c %s "$file")
damage() {  # name, expected message, python that edits bytearray b
  cp "$file" "$tmp/$1.tfevents"
  python3 -c "import sys; b = bytearray(open(sys.argv[1], 'rb').read()); $3; open(sys.argv[1], 'wb').write(b)" "$tmp/$1.tfevents"
  if python3 "$reader" "$tmp/$1.tfevents" > /dev/null 2> "$tmp/$1.err"; then fail "$1: the reader accepted it"; fi
  grep -q "$2" "$tmp/$1.err" || fail "$1: message lacks '$2': $(cat "$tmp/$1.err")"
  echo "$1: $(cat "$tmp/$1.err")"
}
python3 "$reader" "$file" > /dev/null || fail "the undamaged copy does not read"
damage payload "data CRC mismatch" "b[$size // 2] ^= 0x10"
damage length "length CRC mismatch" "b[0] ^= 0x01"
damage last_byte "data CRC mismatch" "b[-1] ^= 0x80"
damage cut "truncated" "del b[-7:]"

echo "== 4. off by default; a bad directory is one line naming it"
"$gpt" --run_dir "$tmp/off" --set "$small,train.steps=1,train.eval_every=0" > "$tmp/off.log"
! grep -q "^tensorboard:" "$tmp/off.log" || fail "tensorboard on by default"
[ -z "$(find "$tmp/off" -name '*tfevents*')" ] || fail "an event file without train.tensorboard_dir"
: > "$tmp/plain_file"
if "$gpt" --run_dir "$tmp/bad" --set "$small,train.steps=1,train.tensorboard_dir=$tmp/plain_file/tb" > /dev/null 2> "$tmp/bad.err"; then
  fail "an uncreatable tensorboard_dir was accepted"
fi
[ "$(wc -l < "$tmp/bad.err")" = 1 ] || fail "not one line: $(cat "$tmp/bad.err")"
grep -q "$tmp/plain_file/tb" "$tmp/bad.err" || fail "error does not name the directory: $(cat "$tmp/bad.err")"
echo "all tensorboard checks passed"
