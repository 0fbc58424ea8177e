#!/usr/bin/env bash
# Pipeline and context parallelism in the trainer (issue 14): gpt_tiny (4 layers, tied
# embeddings, AdamW) for 12 steps on one rank, PP2, PP2·GTP2 and PP2·VPP2
# (interleaved) gives the same losses (within 2e-4: the tied weight's two
# gradient halves add in another order); the step line shows the bubble; a
# PP2·GTP2 checkpoint resumes under PP4 and on one rank; bad pipeline
# settings are one-line errors naming the fix.
set -euo pipefail
bin="$1"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
small="model.seq_len=32,train.micro_batch=2,train.global_batch=16,train.log_every=1,optim.warmup_steps=3,train.eval_every=6,train.steps=12,checkpoint.keep_last=5,parallel.tp=1"
losses() { grep -o '"step": [0-9]*, "loss": [0-9.]*' "$1" | sed 's/"step": \([0-9]*\), "loss": \(.*\)/\1 \2/'; }
same() {  # run a, run b, first step, tolerance[, last step]
  local last="${5:-1000000000}"
  paste <(losses "$tmp/$1/metrics.jsonl" | awk -v f="$3" -v l="$last" '$1 >= f && $1 <= l') \
        <(losses "$tmp/$2/metrics.jsonl" | awk -v f="$3" -v l="$last" '$1 >= f && $1 <= l') |
    awk -v a="$1" -v b="$2" -v tol="$4" '{ d = $2 - $4; if (d < 0) d = -d;
        if ($1 != $3 || d > tol * $2) { print a " vs " b ": step " $1 " " $2 " vs " $4; bad = 1 } ++n }
      END { if (n == 0) { print "no steps compared"; bad = 1 } exit bad }'
}

"$bin" --run_dir "$tmp/one" --set "$small,parallel.world_size=1,parallel.tp_num_weight_shards=1" > "$tmp/one.log"
for layout in "pp2:parallel.world_size=2,parallel.tp_num_weight_shards=1,parallel.pp=2" \
              "pp2gtp2:parallel.world_size=4,parallel.tp_num_weight_shards=2,parallel.pp=2,checkpoint.every=6" \
              "pp2vpp2:parallel.world_size=2,parallel.tp_num_weight_shards=1,parallel.pp=2,parallel.vpp=2"; do
  name="${layout%%:*}"
  "$bin" --run_dir "$tmp/$name" --set "$small,${layout#*:}" > "$tmp/$name.log"
  grep -q "bubble" "$tmp/$name.log" || { echo "$name: no bubble in the step line"; exit 1; }
  grep -q "PP 2" "$tmp/$name.log"
  same one "$name" 1 2e-4
  grep -q "validation loss" "$tmp/$name.log"
  echo "$name: 12 steps match one rank"
done
grep -q "(VPP 2)" "$tmp/pp2vpp2.log"
# Explicit stage boundaries (3 layers, then 1) match too; the trace shows the pipeline's passes and waits.
"$bin" --run_dir "$tmp/pp2b" --set "$small,parallel.world_size=2,parallel.tp_num_weight_shards=1,parallel.pp=2,parallel.pp_boundaries=0:3,train.trace_steps=1" > "$tmp/pp2b.log"
same one pp2b 1 2e-4
trace=$(ls "$tmp"/pp2b/trace*.json | head -1)
grep -q '"B0.3"' "$trace" && grep -q '"wait ' "$trace" || { echo "no pipeline spans in $trace"; exit 1; }
echo "pp2 with boundaries 0,3: 12 steps match one rank; trace has the passes and the waits"

for layout in "pp4:parallel.world_size=4,parallel.tp_num_weight_shards=1,parallel.pp=4" \
              "single:parallel.world_size=1,parallel.tp_num_weight_shards=1"; do
  name="${layout%%:*}"; over="${layout#*:}"
  mkdir -p "$tmp/r_$name/checkpoints"
  cp -r "$tmp/pp2gtp2/checkpoints/iter_0000006" "$tmp/r_$name/checkpoints/"
  echo 6 > "$tmp/r_$name/checkpoints/latest"
  "$bin" --run_dir "$tmp/r_$name" --set "$small,$over" > "$tmp/r_$name.log"
  grep -q "resumed from" "$tmp/r_$name.log"
  same pp2gtp2 "r_$name" 7 2e-4
  echo "$name: resumes the PP2·GTP2 checkpoint, steps 7..12 match"
done

# Context parallelism: CP2 (ring attention), CP2·PP2 and CP2 with RoPE (rotated by global
# positions) match one rank; a CP2 run resumes exactly.
"$bin" --run_dir "$tmp/one_rope" --set "$small,parallel.world_size=1,parallel.tp_num_weight_shards=1,model.rope=true" > "$tmp/one_rope.log"
"$bin" --run_dir "$tmp/cp2rope" --set "$small,parallel.world_size=2,parallel.tp_num_weight_shards=1,parallel.cp=2,model.rope=true" > "$tmp/cp2rope.log"
same one_rope cp2rope 1 2e-4
echo "cp2 rope: 12 steps match one rank"
for layout in "cp2:parallel.world_size=2,parallel.tp_num_weight_shards=1,parallel.cp=2,checkpoint.every=6" \
              "cp2pp2:parallel.world_size=4,parallel.tp_num_weight_shards=1,parallel.cp=2,parallel.pp=2"; do
  name="${layout%%:*}"
  "$bin" --run_dir "$tmp/$name" --set "$small,${layout#*:}" > "$tmp/$name.log"
  grep -q "CP 2" "$tmp/$name.log"
  same one "$name" 1 2e-4
  echo "$name: 12 steps match one rank"
done
mkdir -p "$tmp/r_cp2/checkpoints"
cp -r "$tmp/cp2/checkpoints/iter_0000006" "$tmp/r_cp2/checkpoints/"
echo 6 > "$tmp/r_cp2/checkpoints/latest"
"$bin" --run_dir "$tmp/r_cp2" --set "$small,parallel.world_size=2,parallel.tp_num_weight_shards=1,parallel.cp=2" > "$tmp/r_cp2.log"
same cp2 r_cp2 7 0
echo "cp2: resumes exactly (steps 7..12 identical)"

# Packed q, k, v (train.pack_projections=on, bf16: one GEMM a pass, the parts'
# main grads side by side, a grad group) under PP2 and PP2·GTP2 (packed
# through copies) match one packed rank. bf16 rounds the tied weight's two
# gradient halves' other order into the next forward, and the runs drift:
# steps 1..6 were within 2.4e-5 of the loss, step 8 (the loss turns there and
# amplifies any difference) 1.1e-3 (2026-12-06, the same with
# OPENBLAS_CORETYPE Sandybridge, Haswell or SkylakeX; the same layouts
# unpacked: 2.1e-4). So 1e-4 for steps 1..6 and 5e-3 after. What this can catch,
# measured by dropping one part's weight gradient on one packed rank: without
# v's, step 2's loss moves 4.4e-4 of itself and step 3's 1.4e-3 (caught);
# without q's or k's only 1e-5..3e-5 through step 6 (attention is near
# uniform this early), which the loss cannot see: q's and k's gradients are
# checked one by one against an f32 reference in layers:gpt_bf16_test.
bf="$small,train.precision=bf16,train.pack_projections=on"
"$bin" --run_dir "$tmp/one_packed" --set "$bf,parallel.world_size=1,parallel.tp_num_weight_shards=1" > "$tmp/one_packed.log"
for layout in "pp2_packed:parallel.world_size=2,parallel.tp_num_weight_shards=1,parallel.pp=2" \
              "pp2gtp2_packed:parallel.world_size=4,parallel.tp_num_weight_shards=2,parallel.pp=2"; do
  name="${layout%%:*}"
  "$bin" --run_dir "$tmp/$name" --set "$bf,${layout#*:}" > "$tmp/$name.log"
  same one_packed "$name" 1 1e-4 6
  same one_packed "$name" 7 5e-3
  echo "$name: 12 steps match one packed rank"
done

expect_error() {  # overrides, text the error must contain
  if "$bin" --run_dir "$tmp/bad" --set "$small,train.steps=2,$1" > "$tmp/bad.log" 2>&1; then
    echo "accepted: $1"; exit 1
  fi
  grep -q "$2" "$tmp/bad.log" || { echo "error for $1 lacks '$2':"; cat "$tmp/bad.log"; exit 1; }
}
expect_error "parallel.world_size=3,parallel.tp_num_weight_shards=1,parallel.pp=3" "divisible by parallel.pp"
expect_error "parallel.world_size=4,parallel.tp_num_weight_shards=1,parallel.pp=4,train.global_batch=4" "needs at least 4 micro-batches"
expect_error "parallel.world_size=2,parallel.tp_num_weight_shards=1,parallel.pp=2,parallel.vpp=2,train.global_batch=6" "multiple of the pipeline stages"
expect_error "parallel.world_size=1,parallel.tp_num_weight_shards=1,parallel.vpp=2" "needs parallel.pp > 1"
expect_error "parallel.world_size=2,parallel.tp_num_weight_shards=1,parallel.pp=2,parallel.pp_boundaries=0:4" "pp_boundaries"
expect_error "parallel.world_size=2,parallel.tp_num_weight_shards=1,parallel.cp=2,model.seq_len=30" "divisible by 2 × parallel.cp"
echo "pp/cp: ok"
