#!/usr/bin/env bash
# checkpoint.init_from (issue 18): a run with no checkpoint of its own starts
# from another checkpoint's weights, resharded to its layout.
#
# Reference: run A (gpt_tiny's TP2·GTP2, 4 ranks) trains 6 steps and
# evaluates its final weights on the validation split. A new run with
# init_from under another layout takes one step with lr 1e-30 (an f32 update
# that leaves every weight as it was) and evaluates: its validation loss must
# be A's (the same validation samples: eval_batches × data lanes is kept at
# 4 × micro_batch). The same through `ckpt export --format hf` + `ckpt
# import --format hf`. The first training step's loss must agree across
# layouts and differ from a fresh run's. Then: the run's own checkpoint wins
# over init_from (and the log says so); a model that does not match is
# refused naming the tensor and both shapes, or the setting and both values.
set -euo pipefail
train="$1" ckpt="$2"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
s="model.n_layer=2,model.seq_len=32,train.micro_batch=2,train.global_batch=8,train.log_every=1,optim.warmup_steps=0"
frozen="optim.lr=1e-30,optim.min_lr=0,optim.decay=constant,train.steps=1,train.eval_every=1"
val() { grep -o '"val_loss": [0-9.]*' "$1/metrics.jsonl" | tail -1 | cut -d' ' -f2; }
loss1() { grep -o '"step": 1, "loss": [0-9.]*' "$1/metrics.jsonl" | cut -d' ' -f4; }
close() {  # a b rel what
  awk -v a="$1" -v b="$2" -v r="$3" -v w="$4" 'BEGIN { d = a - b; if (d < 0) d = -d;
    if (d > r * b) { print "FAIL " w ": " a " vs " b; exit 1 } print "ok " w ": " a " vs " b }'
}

"$train" --run_dir "$tmp/A" --set "$s,train.steps=6,train.eval_every=6,train.eval_batches=2" > "$tmp/A.log"
want=$(val "$tmp/A")
"$ckpt" export --format hf "$tmp/A/checkpoints" "$tmp/A_hf" > /dev/null
"$ckpt" import --format hf "$tmp/A_hf" "$tmp/A_imported" > /dev/null

# name : data lanes : layout
for layout in "tp2:1:parallel.world_size=2,parallel.tp=2,parallel.tp_num_weight_shards=2" \
              "gtp2:2:parallel.world_size=2,parallel.tp=1,parallel.tp_num_weight_shards=2" \
              "single:1:parallel.world_size=1,parallel.tp=1,parallel.tp_num_weight_shards=1" \
              "imported_gtp4:4:parallel.world_size=4,parallel.tp=1,parallel.tp_num_weight_shards=4"; do
  name="${layout%%:*}"; rest="${layout#*:}"; lanes="${rest%%:*}"; over="${rest#*:}"
  from="$tmp/A/checkpoints"
  [[ "$name" == imported* ]] && from="$tmp/A_imported"
  "$train" --run_dir "$tmp/$name" --set "$s,$frozen,$over,train.eval_batches=$((4 / lanes)),checkpoint.init_from=$from" > "$tmp/$name.log"
  grep -q "initialised the model from .* (checkpoint.init_from" "$tmp/$name.log" || { cat "$tmp/$name.log"; exit 1; }
  close "$(val "$tmp/$name")" "$want" 2e-6 "$name: validation loss of A's weights"
done
# One iter_ directory works as well as a root.
"$train" --run_dir "$tmp/iterdir" --set "$s,$frozen,train.eval_batches=2,checkpoint.init_from=$tmp/A/checkpoints/iter_0000006" > /dev/null
close "$(val "$tmp/iterdir")" "$want" 2e-6 "iter_ dir: validation loss of A's weights"

# The first step's loss is A's weights on batch 1, whatever the layout...
close "$(loss1 "$tmp/gtp2")" "$(loss1 "$tmp/tp2")" 2e-6 "first-step loss, GTP2 vs TP2"
close "$(loss1 "$tmp/imported_gtp4")" "$(loss1 "$tmp/tp2")" 2e-6 "first-step loss, imported GTP4 vs TP2"
# ...and not a fresh model's (the weights were loaded at all).
"$train" --run_dir "$tmp/fresh" --set "$s,$frozen,train.eval_batches=4" > /dev/null
awk -v a="$(loss1 "$tmp/tp2")" -v f="$(loss1 "$tmp/fresh")" 'BEGIN { if (a > f - 0.1) { print "FAIL: " a " is no better than a fresh model " f; exit 1 } }'

# A bf16 run: its f32 masters come from the f32 checkpoint, its weights are
# the rounded values (so the loss is A's within bf16 rounding).
"$train" --run_dir "$tmp/bf16" --set "$s,$frozen,train.eval_batches=4,parallel.world_size=2,parallel.tp=2,parallel.tp_num_weight_shards=2,train.precision=bf16,checkpoint.init_from=$tmp/A/checkpoints" > /dev/null
close "$(val "$tmp/bf16")" "$want" 1e-2 "bf16: validation loss of A's weights"

# The run's own checkpoint wins: a restart continues, init_from is ignored.
"$train" --run_dir "$tmp/tp2" --set "$s,$frozen,train.steps=2,parallel.world_size=2,parallel.tp=2,parallel.tp_num_weight_shards=2,checkpoint.init_from=$tmp/A/checkpoints" > "$tmp/again.log"
grep -q "checkpoint.init_from .* ignored: resuming this run's own checkpoint" "$tmp/again.log" || { cat "$tmp/again.log"; exit 1; }
grep -q "resumed from .*iter_0000001" "$tmp/again.log"
! grep -q "initialised the model from" "$tmp/again.log"

refused() {  # name, pattern, overrides
  if "$train" --run_dir "$tmp/bad_$1" --set "$s,$frozen,$3" > /dev/null 2> "$tmp/bad.err"; then
    echo "$1: expected failure"; exit 1
  fi
  grep -q -- "$2" "$tmp/bad.err" || { echo "$1: message lacks '$2':"; cat "$tmp/bad.err"; exit 1; }
  # Found before anything is written (init_from's recorded model is read first): one line, no run directory.
  [ "$(wc -l < "$tmp/bad.err")" -eq 1 ] && [ ! -e "$tmp/bad_$1" ] || { echo "$1: wrote or said too much"; exit 1; }
  echo "ok $1 refused: $(cat "$tmp/bad.err")"
}
refused width "checkpoint.init_from: model.n_embd is 64 in .* but 32 in this run" \
  "model.n_embd=32,checkpoint.init_from=$tmp/A/checkpoints"
refused depth "checkpoint.init_from: model.n_layer is [0-9]* in .* but 4 in this run" "model.n_layer=4,checkpoint.init_from=$tmp/A/checkpoints"
refused heads "model.n_head is 4 in .* but 2 in this run" "model.n_head=2,checkpoint.init_from=$tmp/A/checkpoints"
refused missing "checkpoint.init_from $tmp/nope: no checkpoint in $tmp/nope" "checkpoint.init_from=$tmp/nope"
echo "ok: init_from"

# An imported checkpoint used as a run's own (copied into its checkpoint dir)
# is named, with the setting that starts from it (it used to fail with
# ".../exp_avg is not in ...").
mkdir -p "$tmp/own_import" && cp -r "$tmp/A_imported" "$tmp/own_import/checkpoints"
if "$train" --run_dir "$tmp/own_import" --set "$s,$frozen" > /dev/null 2> "$tmp/own_import.err"; then
  echo "FAIL: an imported checkpoint resumed as a run"; exit 1
fi
grep -q "holds weights imported from .*not a run to resume: start from it with checkpoint.init_from=" "$tmp/own_import.err" ||
  { echo "FAIL: imported checkpoint as own:"; cat "$tmp/own_import.err"; exit 1; }
echo "ok: an imported checkpoint is not resumed"

# checkpoint.init_model=true takes the model from the imported recipe: the run
# names no model setting (gpt_tiny's own are 4 layers, T=64) and still gets
# A's validation loss; a model.* --set applies on top (recompute changes no value).
nomodel="train.micro_batch=2,train.global_batch=8,train.log_every=1,optim.warmup_steps=0,$frozen,train.eval_batches=2"  # 2 lanes: A's 8 samples
"$train" --run_dir "$tmp/init_model" --set "$nomodel,checkpoint.init_from=$tmp/A_imported,checkpoint.init_model=true,model.recompute=true" > "$tmp/init_model.log"
close "$(val "$tmp/init_model")" "$want" 2e-6 "init_model: validation loss of A's weights without retyping the model"
grep -q "^recompute: true" "$tmp/init_model/recipe.pbtxt" 2>/dev/null || grep -q "recompute: true" "$tmp/init_model/recipe.pbtxt" ||
  { echo "FAIL: model.recompute did not apply on top"; cat "$tmp/init_model/recipe.pbtxt"; exit 1; }
if "$train" --run_dir "$tmp/init_model_none" --set "$nomodel,checkpoint.init_model=true" > /dev/null 2> "$tmp/init_model.err"; then
  echo "FAIL: init_model without init_from accepted"; exit 1
fi
grep -q "checkpoint.init_model=true takes the model from checkpoint.init_from: set it" "$tmp/init_model.err"
echo "ok: init_model"
