#!/usr/bin/env bash
# The same recipe as 4 threads (comm/local) and as 4 processes under gtprun
# (comm/ucx) gives the same losses within f32 tolerance (the backends' sum
# orders differ), for TP2·GTP2 with sequence parallelism and for GTP4.
set -euo pipefail
bin="$1" gtprun="$2"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
small="model.n_layer=2,model.seq_len=32,train.micro_batch=2,train.global_batch=8,train.log_every=1,train.steps=8,train.eval_every=0,checkpoint.no_resume=true"
losses() { grep -o '"step": [0-9]*, "loss": [0-9.]*' "$1" | sed 's/"step": \([0-9]*\), "loss": \(.*\)/\1 \2/'; }
for layout in "tp2gtp2sp:parallel.tp=2,parallel.tp_num_weight_shards=4,parallel.sequence_parallel=true" \
              "gtp4:parallel.tp=1,parallel.tp_num_weight_shards=4"; do
  name="${layout%%:*}"; over="${layout#*:}"
  "$bin" --run_dir "$tmp/threads_$name" --set "$small,$over" > /dev/null
  "$gtprun" --nproc 4 -- "$bin" --run_dir "$tmp/ucx_$name" --set "$small,$over" > "$tmp/ucx_$name.log"
  grep -q "world 4 (ucx)" "$tmp/ucx_$name.log"
  paste <(losses "$tmp/threads_$name/metrics.jsonl") <(losses "$tmp/ucx_$name/metrics.jsonl") |
    awk -v n="$name" '{ d = $2 - $4; if (d < 0) d = -d;
                        if ($1 != $3 || d > 1e-5 * $2) { print n ": " $0; bad = 1 } ; c++ }
                      END { if (c != 8) { print n ": " c " steps"; bad = 1 }; exit bad }'
  echo "$name: threads and UCX processes agree on 8 steps"
done
# A world size that disagrees with the launcher's process count is an error naming both.
if "$gtprun" --nproc 2 -- "$bin" --run_dir "$tmp/mismatch" --set "$small" > "$tmp/mismatch.log" 2>&1; then
  echo "world_size 4 under 2 processes: expected failure"; exit 1
fi
grep -q "parallel.world_size is 4 but the launcher started 2 processes" "$tmp/mismatch.log" \
  || { echo "mismatch message:"; cat "$tmp/mismatch.log"; exit 1; }
echo "world-size mismatch under the launcher is an error"
# Two "machines" (gtprun --nnodes 2, one per node_rank, 2 ranks each) train the
# GTP4 run of 4 processes above: the same losses within the same tolerance.
port=$((20000 + RANDOM % 20000))
for node in 0 1; do
  "$gtprun" --nnodes 2 --node_rank "$node" --master_port "$port" --nproc 2 -- \
    "$bin" --run_dir "$tmp/nodes" --set "$small,parallel.tp=1,parallel.tp_num_weight_shards=4" > "$tmp/node$node.log" 2>&1 &
  pids[$node]=$!
done
wait "${pids[0]}" && wait "${pids[1]}" || { echo "two-node run failed:"; cat "$tmp/node0.log" "$tmp/node1.log"; exit 1; }
grep -q "^\[rank 0\] gtp gpt_tiny | world 4 (ucx)" "$tmp/node0.log" || { cat "$tmp/node0.log"; exit 1; }
paste <(losses "$tmp/ucx_gtp4/metrics.jsonl") <(losses "$tmp/nodes/metrics.jsonl") |
  awk '{ d = $2 - $4; if (d < 0) d = -d; if ($1 != $3 || d > 1e-5 * $2) { print "two nodes: " $0; bad = 1 }; c++ }
       END { if (c != 8) { print "two nodes: " c " steps"; bad = 1 }; exit bad }'
echo "gtprun --nnodes 2: the same 8 losses as one gtprun of 4"
