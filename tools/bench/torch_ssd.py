#!/usr/bin/env python3
"""The chunked Mamba-2 SSD scan in PyTorch, torch.compile'd: the side-by-side
anchor for gtp's scan (issue 31), since no Mamba package is installed on the
GPU machine. Same math as core/kernels/ssm/ssd_scan.h, per batch b and head h:

  S_t = exp(dt_t·A_h)·S_{t−1} + dt_t · x_t ⊗ B_t,   y_t = S_t·C_t + D_h·x_t

computed by chunks of L steps (the "minimal SSD" of the Mamba-2 paper, written
here from the equations, not copied): with a_t = dt_t·A_h and cs the
within-chunk cumulative sum of a,
  1. diagonal blocks  y_i += Σ_{j ≤ i} (C_i·B_j)·exp(cs_i − cs_j)·dt_j·x_j
  2. chunk states     S_c  = Σ_j exp(cs_last − cs_j)·dt_j·x_j ⊗ B_j
  3. between chunks   S_in[c+1] = exp(cs_last[c])·S_in[c] + S_c   (S_in[0] = 0)
  4. state → output   y_i += exp(cs_i)·S_in[c]·C_i
The products (1, 2, 4) run in the input dtype (bf16: tensor cores), the
cumulative sums and exponentials in f32; the backward is autograd's.

  python3 tools/bench/torch_ssd.py --check          # the chunked form vs the
                                                    # recurrence in float64 (small shapes)
  python3 tools/bench/torch_ssd.py                  # ms per forward+backward, bf16,
                                                    # T = 1024, 4096, 8192, two head shapes
  python3 tools/bench/torch_ssd.py --shapes h96p16n16   # one of them (acceptance.sh)

Shapes (B = 8 sequences, G = 1 group): "h96p16n16" is gtp's hybrid GPT
(d_inner 1536, head_dim 16, d_state 16); "h24p64n128" is Mamba-2's usual
head dim 64 and 128 states. Timing: CUDA events around `--reps` calls after
warm-up (which includes compilation, fresh for every shape and T: dynamo's
recompile limit would otherwise run later shapes eagerly); one line per shape.
"""
import argparse
import sys
import time


def chunked_scan(x, dt, A, Bm, Cm, D, chunk):
    """x [B, T, H, P], dt [B, T, H] (f32, > 0), A [H] (f32, < 0), Bm/Cm [B, T, N]
    (one group), D [H] → y [B, T, H, P] in x's dtype. T % chunk == 0."""
    import torch
    b, t, h, p = x.shape
    n = Bm.shape[-1]
    c, l = t // chunk, chunk
    dtype = x.dtype
    a = (dt * A).view(b, c, l, h).permute(0, 3, 1, 2)              # [b, h, c, l] f32
    cs = torch.cumsum(a, dim=-1)                                  # within each chunk
    xdt = (x * dt.unsqueeze(-1).to(dtype)).view(b, c, l, h, p)     # dt_j·x_j
    Bc, Cc = Bm.view(b, c, l, n), Cm.view(b, c, l, n)
    # 1. Diagonal blocks: exp(cs_i − cs_j) for j ≤ i (0 above the diagonal).
    seg = cs.unsqueeze(-1) - cs.unsqueeze(-2)                     # [b, h, c, l(i), l(j)]
    causal = torch.ones(l, l, dtype=torch.bool, device=x.device).tril()
    decay = torch.exp(seg.masked_fill(~causal, float("-inf"))).to(dtype)
    scores = torch.einsum("bcin,bcjn->bcij", Cc, Bc)              # C_i·B_j
    y = torch.einsum("bcij,bhcij,bcjhp->bcihp", scores, decay, xdt)
    # 2. Each chunk's state from its own inputs.
    to_end = torch.exp(cs[..., -1:] - cs).to(dtype)               # [b, h, c, l]
    states = torch.einsum("bcjn,bhcj,bcjhp->bchpn", Bc, to_end, xdt).float()
    # 3. The states entering each chunk: a recurrence over the c chunks (short).
    chunk_decay = torch.exp(cs[..., -1])                          # [b, h, c]
    s_in = [torch.zeros_like(states[:, 0])]
    for k in range(c - 1):
        s_in.append(chunk_decay[:, :, k, None, None] * s_in[-1] + states[:, k])
    s_in = torch.stack(s_in, dim=1).to(dtype)                     # [b, c, h, p, n]
    # 4. Entering state → each step's output.
    from_start = torch.exp(cs).to(dtype)                          # [b, h, c, l]
    y = y + torch.einsum("bcin,bchpn,bhci->bcihp", Cc, s_in, from_start)
    return y.reshape(b, t, h, p) + x * D.view(1, 1, h, 1).to(dtype)


def recurrence(x, dt, A, Bm, Cm, D):
    """The scan step by step in float64 (the reference)."""
    import torch
    x, dt, A, Bm, Cm, D = (v.double() for v in (x, dt, A, Bm, Cm, D))
    b, t, h, p = x.shape
    S = torch.zeros(b, h, p, Bm.shape[-1], dtype=torch.float64, device=x.device)
    ys = []
    for i in range(t):
        S = torch.exp(dt[:, i] * A)[..., None, None] * S + \
            (dt[:, i, :, None] * x[:, i])[..., None] * Bm[:, i, None, None, :]
        ys.append(torch.einsum("bhpn,bn->bhp", S, Cm[:, i]) + D[None, :, None] * x[:, i])
    return torch.stack(ys, dim=1)


def inputs(b, t, h, p, n, dtype, device, seed=0):
    import torch
    g = torch.Generator(device="cpu").manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g)
    x = r(b, t, h, p).to(device, dtype)
    dt = torch.nn.functional.softplus(r(b, t, h) - 1).to(device)          # > 0, f32
    A = -torch.exp(r(h) * 0.5).to(device)                                  # < 0, f32
    Bm, Cm = r(b, t, n).to(device, dtype), r(b, t, n).to(device, dtype)
    D = r(h).to(device)
    return x, dt, A, Bm, Cm, D


def check(device):
    """The chunked form against the float64 recurrence: f32 within 1e-4
    (relative to the output's scale; f32 exp/cumsum over ≤ 64 steps), every
    chunk length, gradients too (autograd of both)."""
    import torch
    worst = 0.0
    for (t, chunk) in [(64, 16), (64, 64), (48, 8)]:
        x, dt, A, Bm, Cm, D = inputs(2, t, 3, 4, 5, torch.float32, device, seed=t + chunk)
        for v in (x, dt, Bm, Cm):
            v.requires_grad_(True)
        y = chunked_scan(x, dt, A, Bm, Cm, D, chunk)
        ref = recurrence(x, dt, A, Bm, Cm, D)
        err = ((y.double() - ref).abs().max() / ref.abs().max()).item()
        g = torch.randn_like(ref)
        gy = torch.autograd.grad((y.double() * g).sum(), (x, dt, Bm, Cm))
        gr = torch.autograd.grad((ref * g).sum(), (x, dt, Bm, Cm))
        gerr = max(((a.double() - b_).abs().max() / b_.abs().max()).item() for a, b_ in zip(gy, gr))
        worst = max(worst, err, gerr)
        print(f"check T={t} chunk={chunk}: y {err:.2e}, grads {gerr:.2e} (relative to max |ref|)")
        if not (err < 1e-4 and gerr < 1e-4):  # NaN fails too
            print("torch_ssd: check FAIL")
            return 1
    print(f"torch_ssd: check PASS (worst {worst:.2e})")
    return 0


SHAPES = {"h96p16n16": (96, 16, 16), "h24p64n128": (24, 64, 128)}


def bench(device, reps, compile_, shapes):
    import torch
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name() if device == 'cuda' else 'cpu'}, "
          f"bf16, B=8, G=1, chunk 128, {'torch.compile' if compile_ else 'eager'}")
    print("shape        T      fwd ms   fwd+bwd ms")
    for name in shapes:
        h, p, n = SHAPES[name]
        for t in (1024, 4096, 8192):
            # A fresh compilation per shape: dynamo's recompile limit (8) would
            # otherwise run the later shapes eagerly without saying so in the table.
            if compile_:
                torch._dynamo.reset()
            f = torch.compile(chunked_scan, dynamic=False) if compile_ else chunked_scan
            x, dt, A, Bm, Cm, D = inputs(8, t, h, p, n, torch.bfloat16, device)
            for v in (x, dt, Bm, Cm):
                v.requires_grad_(True)
            dy = torch.randn(8, t, h, p, device=device, dtype=torch.bfloat16)

            def fwd():
                with torch.no_grad():
                    return f(x, dt, A, Bm, Cm, D, 128)

            def fwd_bwd():
                y = f(x, dt, A, Bm, Cm, D, 128)
                return torch.autograd.grad(y, (x, dt, Bm, Cm), dy)

            out = []
            for run in (fwd, fwd_bwd):
                for _ in range(3):
                    run()  # warm-up (and compilation)
                if device == "cuda":
                    torch.cuda.synchronize()
                    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    s.record()
                    for _ in range(reps):
                        run()
                    e.record()
                    torch.cuda.synchronize()
                    out.append(s.elapsed_time(e) / reps)
                else:
                    t0 = time.perf_counter()
                    for _ in range(reps):
                        run()
                    out.append((time.perf_counter() - t0) * 1e3 / reps)
            print(f"{name:11s} {t:5d}  {out[0]:9.3f}  {out[1]:10.3f}", flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the float64 recurrence and exit")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--eager", action="store_true", help="no torch.compile")
    ap.add_argument("--shapes", default=",".join(SHAPES),
                    help="comma-separated, of " + ", ".join(SHAPES))
    a = ap.parse_args()
    shapes = [x for x in a.shapes.split(",") if x]
    bad = [x for x in shapes if x not in SHAPES]
    if bad or not shapes:
        ap.error(f"--shapes: unknown {bad or 'empty'}; choose from {', '.join(SHAPES)}")
    import torch
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if a.check:
        return check(device)
    return bench(device, a.reps, not a.eager, shapes)


if __name__ == "__main__":
    sys.exit(main())
