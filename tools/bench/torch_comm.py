#!/usr/bin/env python3
"""torch.distributed (NCCL) bus bandwidth, the yardstick for //comm:bench.

  python3 -m torch.distributed.run --nproc_per_node 2 tools/bench/torch_comm.py
Prints, per op and size, time and bus bandwidth with nccl-tests' conventions:
algbw = bytes / time; busbw = algbw * (n-1)/n (all-gather, reduce-scatter),
algbw * 2(n-1)/n (all-reduce). Bytes = the full (gathered / reduced) buffer.
"""
import os

import torch
import torch.distributed as dist


def main():
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    dist.init_process_group("nccl")
    rank, n = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    for op in ("all_gather", "reduce_scatter", "all_reduce"):
        for mib in (1, 4, 16, 64, 256):
            numel = mib * (1 << 20) // 4
            full = torch.randn(numel, device="cuda")
            part = torch.randn(numel // n, device="cuda")
            if op == "all_gather":
                fn = lambda: dist.all_gather_into_tensor(full, part)
                factor = (n - 1) / n
            elif op == "reduce_scatter":
                fn = lambda: dist.reduce_scatter_tensor(part, full)
                factor = (n - 1) / n
            else:
                fn = lambda: dist.all_reduce(full)
                factor = 2 * (n - 1) / n
            for _ in range(5):
                fn()
            torch.cuda.synchronize()
            reps = 20
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(reps):
                fn()
            e.record()
            torch.cuda.synchronize()
            ms = s.elapsed_time(e) / reps
            algbw = numel * 4 / (ms / 1e3) / 1e9
            if rank == 0:
                print(f"torch {op:14s} {mib:4d} MiB  {ms*1e3:9.1f} us  algbw {algbw:7.1f} GB/s  busbw {algbw*factor:7.1f} GB/s", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
