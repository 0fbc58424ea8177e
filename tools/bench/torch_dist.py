#!/usr/bin/env python3
"""PyTorch FSDP2 / DDP training speed of torch_gpt.py's GPT-2, the yardstick
for gtp's GTP and DP layouts (issues 19, 20). One process per GPU:

  python3 -m torch.distributed.run --nproc_per_node 2 tools/bench/torch_dist.py \\
      --mode fsdp2 --n_layer 24 --n_embd 1024 --n_head 16 --micro_batch 8 \\
      --global_batch 16 --steps 30 --json fsdp2.json

  --mode fsdp2  fully_shard on every block, then the root (tied embedding and
                ln_f there), reshard_after_forward=True (ZeRO-3: parameters
                gathered again for the backward), MixedPrecisionPolicy(bf16
                params, f32 gradient reduction), f32 sharded masters;
                --compile: each block torch.compile'd before sharding.
  --mode ddp    DistributedDataParallel over f32 params, bf16 autocast,
                gradients all-reduced in f32 (no_sync on all but the last
                micro-batch); --compile auto (default): torch.compile the DDP
                model, falling back to eager when the first step fails.

Both: torch_gpt.py's model (GPT-2: LayerNorm, GELU-tanh, learned positions,
tied embeddings, biases; SDPA causal attention) with GPT-2's init (N(0,
0.02), zero biases), bf16 autocast, AdamW (fused where it takes the params,
else foreach) with decay on rank >= 2 tensors, grad-norm clip, gtp's lr
schedule (mirror.lr_at); global batch = micro_batch × world × M micro-batches
per step. Tokens are uniform random in [0, V) per rank and step (speed only:
losses are not compared with gtp's). TF32 is off.

Rank 0 prints one line per step and, last, one JSON line: run, world,
median ms/step over the steps after --skip, tokens/s (global), MFU per GPU
(mirror.flop_per_token), per-rank peak memory (max_memory_allocated), and
per-rank weight + grad + optimizer-state bytes measured from the tensors
(local shards under FSDP2).
"""
import argparse
import contextlib
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mirror import f32, flop_per_token, lr_at  # noqa: E402
from torch_gpt import GPT  # noqa: E402


def fsdp2_api():
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    except ImportError:  # torch < 2.6
        from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard
    return fully_shard, MixedPrecisionPolicy


def local(t):
    return t.to_local() if hasattr(t, "to_local") else t


def state_bytes(params, opt):
    """Bytes of this rank's parameters, gradients and optimizer state (local shards)."""
    n = 0
    for p in params:
        n += local(p.data).numel() * local(p.data).element_size()
        if p.grad is not None:
            g = local(p.grad)
            n += g.numel() * g.element_size()
    for st in opt.state.values():
        for v in st.values():
            if torch.is_tensor(v) and v.dim() > 0:
                v = local(v)
                n += v.numel() * v.element_size()
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=["fsdp2", "ddp"], required=True)
    ap.add_argument("--compile", choices=["auto", "on", "off"], default="auto",
                    help="auto: on for ddp (eager if it fails), off for fsdp2")
    ap.add_argument("--n_layer", type=int, default=24)
    ap.add_argument("--n_embd", type=int, default=1024)
    ap.add_argument("--n_head", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--seq_len", type=int, default=1024)
    ap.add_argument("--micro_batch", type=int, default=8, help="sequences per rank per micro-batch")
    ap.add_argument("--global_batch", type=int, default=0, help="0: micro_batch × world")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--min_lr", type=float, default=6e-5)
    ap.add_argument("--warmup_steps", type=int, default=10)
    ap.add_argument("--weight_decay", type=float, default=0.1)
    ap.add_argument("--clip_grad", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--peak_tflops", type=float, default=989.0, help="per GPU (H200 dense bf16)")
    ap.add_argument("--skip", type=int, default=10, help="first steps left out of the median")
    ap.add_argument("--json", help="rank 0 also writes the summary JSON here")
    a = ap.parse_args()

    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    B, T, V, L, C = a.micro_batch, a.seq_len, a.vocab, a.n_layer, a.n_embd
    G = a.global_batch or B * world
    if G % (B * world):
        raise SystemExit(f"torch_dist: global_batch {G} is not a multiple of micro_batch {B} × world {world}")
    M = G // (B * world)

    torch.manual_seed(a.seed)  # the same initial weights on every rank
    model = GPT(V, T, L, C, a.n_head)
    for mod in model.modules():
        if isinstance(mod, (nn.Linear, nn.Embedding)):
            nn.init.normal_(mod.weight, std=0.02)
        if isinstance(mod, nn.Linear) and mod.bias is not None:
            nn.init.zeros_(mod.bias)
    model.to(dev)
    compile_on = a.compile == "on" or (a.compile == "auto" and a.mode == "ddp")
    if a.mode == "fsdp2":
        fully_shard, MixedPrecisionPolicy = fsdp2_api()
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for blk in model.h:
            if compile_on:
                blk.compile()
            fully_shard(blk, mp_policy=mp, reshard_after_forward=True)
        fully_shard(model, mp_policy=mp, reshard_after_forward=True)
        fwd = model
    else:
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(model, device_ids=[torch.cuda.current_device()])
        fwd = torch.compile(model) if compile_on else model
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": a.weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    sched = lambda s: lr_at(s, a.lr, a.min_lr, a.warmup_steps, a.steps)  # noqa: E731
    try:
        opt = torch.optim.AdamW(groups, lr=sched(0), betas=(f32(0.9), f32(0.95)), eps=1e-8, fused=True)
    except (RuntimeError, TypeError):
        opt = torch.optim.AdamW(groups, lr=sched(0), betas=(f32(0.9), f32(0.95)), eps=1e-8, foreach=True)

    g = torch.Generator(device=dev)
    g.manual_seed(a.seed * 1000003 + rank)
    data = torch.randint(0, V, (a.steps, M, B, T + 1), device=dev, generator=g)
    name = f"torch-{a.mode}" + ("-compile" if compile_on else "")
    if rank == 0:
        print(f"{name}: torch {torch.__version__} on {world}x {torch.cuda.get_device_name()}, bf16 autocast, "
              f"L={L} C={C} NH={a.n_head} V={V} T={T}, global batch {G} = {B} x {world} ranks x {M} "
              f"micro-batches, {a.steps} steps", flush=True)

    def step_once(step):
        for grp in opt.param_groups:
            grp["lr"] = sched(step)
        loss_sum = torch.zeros((), device=dev)
        for m in range(M):
            last = m == M - 1
            with model.no_sync() if a.mode == "ddp" and not last else contextlib.nullcontext():
                with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
                    loss = fwd(data[step, m, :, :T], data[step, m, :, 1:])
                (loss / M).backward()
            loss_sum += loss.detach()
        norm = torch.nn.utils.clip_grad_norm_(params, a.clip_grad if a.clip_grad > 0 else float("inf"))
        opt.step()
        return loss_sum / M, norm

    losses, times = [], []
    torch.cuda.reset_peak_memory_stats()
    for step in range(a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        try:
            loss, norm = step_once(step)
        except Exception as e:  # noqa: BLE001 — torch.compile's failures come in many types
            if step != 0 or not compile_on or a.mode != "ddp" or a.compile != "auto":
                raise
            if rank == 0:
                print(f"{name}: torch.compile failed ({type(e).__name__}: {str(e)[:200]}); eager DDP", flush=True)
            fwd, compile_on, name = model, False, "torch-ddp"
            opt.zero_grad(set_to_none=True)
            loss, norm = step_once(step)
        if step == 0:
            state0 = state_bytes(params, opt)  # after the first update: grads and Adam moments exist
        opt.zero_grad(set_to_none=True)
        loss_v = loss.item()
        norm_v = float(norm.full_tensor().item() if hasattr(norm, "full_tensor") else norm.item())
        torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) * 1e3
        losses.append(loss_v)
        times.append(ms)
        if rank == 0:
            print(f"{name} step {step + 1:5d}/{a.steps}  loss {loss_v:.6f}  grad-norm {norm_v:.4f}  "
                  f"lr {sched(step):.4e}  {ms:.2f} ms", flush=True)

    per_rank = [None] * world
    dist.all_gather_object(per_rank, {"peak": torch.cuda.max_memory_allocated(), "state": state0,
                                      "ms": times})
    # A step ends when its slowest rank does.
    step_ms = [max(r["ms"][i] for r in per_rank) for i in range(a.steps)]
    steady = sorted(step_ms[a.skip:] or step_ms)
    med = steady[len(steady) // 2]
    tok_s = G * T / (med / 1e3)
    fpt = flop_per_token(V, T, L, C)
    out = {"run": name, "mode": a.mode, "compiled": compile_on, "world": world, "torch": torch.__version__,
           "device": torch.cuda.get_device_name(), "global_batch": G, "micro_batch": B, "micro_batches": M,
           "median_ms": med, "tokens_per_s": tok_s, "mfu": fpt * tok_s / world / (a.peak_tflops * 1e12),
           "peak_mem_bytes": max(r["peak"] for r in per_rank),
           "peak_mem_per_rank": [r["peak"] for r in per_rank],
           "state_bytes": max(r["state"] for r in per_rank),
           "state_bytes_per_rank": [r["state"] for r in per_rank],
           "losses": losses, "ms": step_ms}
    if rank == 0:
        line = json.dumps(out)
        if a.json:
            with open(a.json, "w") as f:
                f.write(line + "\n")
        print(line, flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
