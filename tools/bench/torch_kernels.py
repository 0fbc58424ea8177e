#!/usr/bin/env python3
"""PyTorch side-by-side reference for the kernel benchmarks (GPU machine).

Times the same problems as //core/kernels/bench:{gemm,attention}_benchmark so
docs/PERFORMANCE.md can report ratios from one run:
  GEMM  C[n,n] = A[n,n] @ B[n,n]^T   f32 (TF32 off) and bf16, n in 1024/4096/8192
  attention (B=4, NH=8, HS=64): naive (materialised probabilities, like ours)
            and F.scaled_dot_product_attention, causal, f32, fwd and fwd+bwd.
Usage: python3 tools/bench/torch_kernels.py
"""
import torch
import torch.nn.functional as F


def bench(fn, reps=20, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    return times[len(times) // 2]  # median ms


def gemm():
    torch.backends.cuda.matmul.allow_tf32 = False
    for dtype in (torch.float32, torch.bfloat16):
        for n in (1024, 4096, 8192):
            a = torch.randn(n, n, device="cuda", dtype=dtype)
            b = torch.randn(n, n, device="cuda", dtype=dtype)
            ms = bench(lambda: a @ b.t())
            print(f"torch gemm {str(dtype)[6:]:9s} n={n:5d}  {ms*1e3:9.1f} us  {2*n**3/ms/1e9:7.1f} TFLOP/s")


def attention():
    B, NH, HS = 4, 8, 64
    for T, bwd in ((256, 0), (1024, 0), (1024, 1), (2048, 1)):
        q, k, v = (torch.randn(B, NH, T, HS, device="cuda", requires_grad=bool(bwd)) for _ in range(3))
        mask = torch.ones(T, T, device="cuda", dtype=torch.bool).tril()
        do = torch.randn(B, NH, T, HS, device="cuda")

        def naive():
            att = (q @ k.transpose(-1, -2)) * HS ** -0.5
            att = att.masked_fill(~mask, float("-inf")).softmax(-1)
            out = att @ v
            if bwd:
                out.backward(do)

        def sdpa():
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            if bwd:
                out.backward(do)

        flops = 2.0 * B * NH * T * T * HS * (3 if bwd else 1)
        for name, fn in (("naive", naive), ("sdpa", sdpa)):
            ms = bench(fn)
            print(f"torch attention {name:5s} T={T:5d} bwd={bwd}  {ms*1e3:9.1f} us  {flops/ms/1e9:7.2f} TFLOP/s")


if __name__ == "__main__":
    print(torch.__version__, torch.cuda.get_device_name())
    gemm()
    attention()
