#!/usr/bin/env bash
# The reference system's validated MoE layout on CPU threads (issue 13): 24
# ranks, dense TP2·GTP4·DP3 and experts EP4·EGTP2·EDP3, 128 experts in tiny
# layers. 20 iterations with finite loss and grad-norm and no skipped step,
# a checkpoint at 20, then a fresh 24-rank process loads it and its
# iteration 21 equals the uninterrupted run's (to metrics.jsonl's 6 decimals).
set -euo pipefail
bin="$1"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
ref="parallel.world_size=24,parallel.tp=2,parallel.tp_num_weight_shards=8,parallel.ep=4"
ref="$ref,parallel.expert_tp_num_weight_shards=2,model.moe.num_experts=128,model.moe.ffn_hidden=8"
ref="$ref,model.n_layer=2,model.n_embd=32,model.seq_len=16,train.micro_batch=1,train.global_batch=12"
ref="$ref,train.log_every=1,train.eval_every=0,optim.warmup_steps=3,train.steps=21"

"$bin" --run_dir "$tmp/a" --set "$ref,checkpoint.every=20" > "$tmp/a.log"
grep -q "TP 2 x GTP 4 x DP 3" "$tmp/a.log"
if grep -q "SKIPPED" "$tmp/a.log"; then echo "a step was skipped"; exit 1; fi
awk -F'[:,]' '/"loss"/ { for (i = 1; i < NF; ++i) if ($i ~ /"(loss|grad_norm)"/) {
                 v = $(i + 1) + 0; if (v != v || v > 1e30 || v <= 0) { print "not finite: " $0; bad = 1 } } }
              END { exit bad }' "$tmp/a/metrics.jsonl"
test "$(grep -c '"loss"' "$tmp/a/metrics.jsonl")" = 21

mkdir -p "$tmp/b/checkpoints"
cp -r "$tmp/a/checkpoints/iter_0000020" "$tmp/b/checkpoints/"
echo 20 > "$tmp/b/checkpoints/latest"
"$bin" --run_dir "$tmp/b" --set "$ref" > "$tmp/b.log"
grep -q "resumed from" "$tmp/b.log"
want=$(grep '"step": 21,' "$tmp/a/metrics.jsonl" | grep -o '"loss": [0-9.]*')
got=$(grep '"step": 21,' "$tmp/b/metrics.jsonl" | grep -o '"loss": [0-9.]*')
echo "iteration 21: uninterrupted $want, resumed $got"
[ -n "$want" ] && [ "$want" = "$got" ]
