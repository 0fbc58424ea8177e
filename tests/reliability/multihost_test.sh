#!/usr/bin/env bash
# Two "hosts" on one machine: network namespaces joined by a veth pair
# (10.77.<k>.1 and .2, addresses only inside them), ranks 0-1 in the first
# and 2-3 in the second, UCX over TCP between them, the rendezvous store on
# rank 0 (MASTER_ADDR = the first namespace's address). gtprun starts ranks
# of one host only, so each rank gets the torchrun variables directly
# (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR/PORT), as a
# per-host launcher would. The run directory is shared (one filesystem), as
# checkpoints require.
#   default: 12 steps across the two namespaces give the same losses as 4
#            UCX processes on one host (gtprun);
#   --cut:   cutting the link mid-run (the veth down) ends every rank with an
#            error (the collective timeout, parallel.comm_timeout_s =
#            --comm_timeout, default 10 s, names the unreachable peer) within
#            --limit seconds; no rank left running.
# Skipped (exit 0, with the reason) without root or `ip netns`.
#
#   multihost_test.sh <train> <gtprun> [--cut] [--limit SEC] [--comm_timeout SEC]
set -uo pipefail
bin="$(realpath "$1")" gtprun="$(realpath "$2")"; shift 2
cut=0 limit=100 comm_timeout=10
while (( $# )); do
  case "$1" in
    --cut) cut=1; shift ;;
    --limit) limit="$2"; shift 2 ;;
    --comm_timeout) comm_timeout="$2"; shift 2 ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
done
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
skip() { echo "SKIPPED: $*"; exit 0; }
(( $(id -u) == 0 )) || skip "not root: cannot create network namespaces"
command -v ip > /dev/null || skip "no 'ip' command"
id=$$; nsa="gtpA_$id" nsb="gtpB_$id" va="gva$id" vb="gvb$id"; k=$(( id % 200 + 20 ))
cleanup() {
  for p in $(ip netns pids "$nsa" 2>/dev/null) $(ip netns pids "$nsb" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
  ip netns del "$nsa" 2>/dev/null; ip netns del "$nsb" 2>/dev/null
}
trap cleanup EXIT
ip netns add "$nsa" 2> "$tmp/ns.err" && ip netns add "$nsb" 2>> "$tmp/ns.err" ||
  skip "cannot create network namespaces: $(cat "$tmp/ns.err")"
ip link add "$va" type veth peer name "$vb" 2> "$tmp/ns.err" || skip "cannot create a veth pair: $(cat "$tmp/ns.err")"
ip link set "$va" netns "$nsa" && ip link set "$vb" netns "$nsb" &&
  ip -n "$nsa" addr add "10.77.$k.1/24" dev "$va" && ip -n "$nsb" addr add "10.77.$k.2/24" dev "$vb" &&
  ip -n "$nsa" link set "$va" up && ip -n "$nsb" link set "$vb" up &&
  ip -n "$nsa" link set lo up && ip -n "$nsb" link set lo up || { echo "FAIL: setting up the veth pair"; exit 1; }

steps=12; (( cut )) && steps=5000
small="model.n_layer=2,model.seq_len=32,train.micro_batch=2,train.global_batch=8,train.log_every=1,train.steps=$steps,train.eval_every=0,checkpoint.no_resume=true,checkpoint.every=0"
(( cut )) && small="$small,parallel.comm_timeout_s=$comm_timeout"
losses() { grep -o '"step": [0-9]*, "loss": [0-9.]*' "$1" | sed 's/"step": \([0-9]*\), "loss": \(.*\)/\1 \2/'; }
port=$(( 20000 + id % 20000 ))
pids=()
for r in 0 1 2 3; do
  ns=$nsa; (( r >= 2 )) && ns=$nsb
  ip netns exec "$ns" env RANK=$r WORLD_SIZE=4 LOCAL_RANK=$(( r % 2 )) LOCAL_WORLD_SIZE=2 \
    MASTER_ADDR="10.77.$k.1" MASTER_PORT=$port UCX_TLS=tcp,self \
    "$bin" --run_dir "$tmp/two_hosts" --set "$small" > "$tmp/rank$r.log" 2>&1 &
  pids+=($!)
done

if (( cut == 0 )); then
  bad=0
  for r in 0 1 2 3; do wait "${pids[$r]}" || { echo "rank $r failed:"; tail -5 "$tmp/rank$r.log"; bad=1; }; done
  (( bad )) && exit 1
  grep -q "world 4 (ucx)" "$tmp/rank0.log" || { echo "rank 0 is not in a 4-rank UCX world"; exit 1; }
  "$gtprun" --nproc 4 -- "$bin" --run_dir "$tmp/one_host" --set "$small" > "$tmp/one_host.log" 2>&1 ||
    { echo "single-host run failed"; tail -5 "$tmp/one_host.log"; exit 1; }
  paste <(losses "$tmp/one_host/metrics.jsonl") <(losses "$tmp/two_hosts/metrics.jsonl") |
    awk -v n=$steps '{ d = $2 - $4; if (d < 0) d = -d;
                       if ($1 != $3 || d > 1e-5 * $2) { print "step " $1 " " $2 " vs " $3 " " $4; bad = 1 }; c++ }
                     END { if (c != n) { print c " of " n " steps"; bad = 1 }; exit bad }' || exit 1
  echo "two namespaces over a veth pair (UCX/TCP) and one host agree on $steps steps"
  exit 0
fi

for (( i = 0; i < 400; ++i )); do grep -qs "step .*loss" "$tmp/rank0.log" && break; sleep 0.05; done
sleep 0.$(( RANDOM % 9 + 1 ))
ip -n "$nsa" link set "$va" down
t0=$(date +%s)
echo "link cut after step $(grep -o 'step *[0-9]*/' "$tmp/rank0.log" | tail -1 | grep -o '[0-9]*')"
for (( ; ; )); do
  alive=0; for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
  (( alive == 0 || $(date +%s) - t0 > limit )) && break
  sleep 0.5
done
took=$(( $(date +%s) - t0 ))
bad=0
for r in 0 1 2 3; do
  if kill -0 "${pids[$r]}" 2>/dev/null; then echo "rank $r still running ${took} s after the cut (hang)"; bad=1; continue; fi
  wait "${pids[$r]}"; rc=$?
  err=$(grep -m1 "^error:" "$tmp/rank$r.log")
  if (( rc == 0 )) || [ -z "$err" ]; then echo "rank $r: exit $rc without an error"; tail -3 "$tmp/rank$r.log"; bad=1; continue; fi
  echo "rank $r: exit $rc: ${err:0:240}"
done
(( bad )) && exit 1
echo "link cut: every rank ended with an error within ${took} s"
