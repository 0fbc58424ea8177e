#!/usr/bin/env bash
# UCX collectives against point-to-point over the tuning settings
# (comm/ucx/ucx_communicator.h: GTP_UCX_LANES, GTP_UCX_REDUCE_THREADS, GTP_UCX_PIECE_KIB),
# both data paths (TCP, shared memory). Prints one line per (setting, size, op)
# with the ratio to point-to-point of the same run.
#   bash tools/bench/ucx_sweep.sh BENCH GTPRUN [ITERS]     (GPU host: from the bundle)
# Env: LANES="1 2" THREADS="1 2" PIECES="1024" SHM="0 1" NPROC=2. Point-to-point
# (Send/Recv) always goes over one lane: one UCP worker's tag bandwidth, what
# ucx_perftest -t tag_bw measures.
set -euo pipefail
BENCH="$1" GTPRUN="$2" ITERS="${3:-10}"
for shm in ${SHM:-0 1}; do
 for l in ${LANES:-1 2}; do
  for t in ${THREADS:-1 2}; do
    for p in ${PIECES:-1024}; do
      GTP_UCX_SHARED_MEMORY=$shm GTP_UCX_LANES=$l GTP_UCX_REDUCE_THREADS=$t GTP_UCX_PIECE_KIB=$p \
        "$GTPRUN" --nproc "${NPROC:-2}" -- "$BENCH" --backend=ucx --min_bytes=4194304 \
        --max_bytes=268435456 --iters="$ITERS" --ops=p2p,p2p_bidir,all_gather,reduce_scatter 2>&1 |
        awk -v shm="$shm" -v l="$l" -v t="$t" -v p="$p" \
          '/\[rank 0\]/ && ($3 == "all_gather" || $3 == "reduce_scatter" || $3 == "p2p" || $3 == "p2p_bidir") {
             printf "shm=%s lanes=%s threads=%s piece_kib=%-5s %-15s %10s busbw %7s ratio %s\n", shm, l, t, p, $3, $(NF-4), $(NF-1), $NF }'
    done
  done
 done
done
