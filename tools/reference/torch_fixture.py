#!/usr/bin/env python3
"""Independent float64 PyTorch reference for //tests:torch_fixture_test.

Why: the model-level tests compare a sharded gtp run with the same C++ model on
one rank, so a bug shared by both paths (tied-embedding gradient, loss scaling,
RoPE convention, GQA grouping...) is invisible to them. This script is a plain
PyTorch re-implementation of gtp's two model styles, written from the
conventions (not the code) of layers/gpt.h and layers/transformer.h:

  gpt2:  x = wte[tok] + wpe[t]; pre-norm blocks with LayerNorm (eps 1e-5, bias),
         q/k/v/o and fc/proj linears with biases, GELU (tanh form); ln_f; LM
         head tied to wte.
  llama: x = wte[tok]; RMSNorm (weight only), no biases, RoPE on q and k
         ("rotate half": pairs (d, d + HS/2), angle t·θ^(−2d/HS), t the position
         in the sequence), GQA (query head h reads kv head h // (NH/NKV)),
         SwiGLU with fc = [gate; up] stacked along out, silu(gate)·up; RMSNorm
         ln_f; untied lm_head.
  both:  linears are y = x·Wᵀ + b with W [out, in]; causal attention with scale
         1/√HS; loss = mean cross-entropy over the targets ≥ 0 (−1 = ignored).

Weights are drawn here (seeded), rounded to float32 (so gtp's f32 LoadGlobal
sees exactly the values used) and the forward/backward runs in float64 on the
CPU. One file per style holds the config (text "meta"), the f32 weights under
gtp's parameter names, the tokens and targets (i32 [B, T]), and in float64 the
loss, the logits [B·T, V] and the gradient of every parameter ("grad." + name).
Each sequence has the same number of ignored targets, so the mean over data
lanes of each lane's mean loss equals the global mean.

File format ("GTPFIX1"), little-endian:
  8 bytes magic b"GTPFIX1\\0", u32 count, then per entry:
  u16 name length, name (utf-8), u8 dtype (1 f32, 2 f64, 3 i32, 4 u8 text),
  u8 rank, rank × i64 dims, the row-major data.

The committed fixtures tests/fixtures/{gpt2,llama}.gtpfix were generated on
the GPU machine (PyTorch is there; the computation is CPU float64) with
  python3 tools/reference/torch_fixture.py --out $OUT --mutants
torch 2.11.0+cu130 (also in each file's meta: "torch=...", "command=...").
The mut_*.gtpfix files that --mutants adds are for showing the test fails
(copy one over the matching fixture, run the test, restore); not committed.
"""
import argparse
import math
import os
import struct
import sys

CFG = dict(vocab=96, seq=16, B=2, n_layer=2, n_embd=32, n_head=4, norm_eps=1e-5,
           rope_theta=10000.0)
STYLES = {
    "gpt2": dict(n_kv_head=4, ffn_hidden=128),
    "llama": dict(n_kv_head=2, ffn_hidden=64),
}
IGNORED_POSITIONS = (3, 10)  # targets = -1 there, in every sequence

F32, F64, I32, TEXT = 1, 2, 3, 4


def write_fixture(path, entries):
    """entries: list of (name, dtype code, shape, flat list of values or bytes)."""
    fmt = {F32: "f", F64: "d", I32: "i"}
    with open(path, "wb") as f:
        f.write(b"GTPFIX1\0" + struct.pack("<I", len(entries)))
        for name, dt, shape, vals in entries:
            n = name.encode()
            f.write(struct.pack("<H", len(n)) + n + struct.pack("<BB", dt, len(shape)))
            f.write(struct.pack("<%dq" % len(shape), *shape))
            numel = 1
            for s in shape:
                numel *= s
            if dt == TEXT:
                assert len(vals) == numel
                f.write(vals)
            else:
                assert len(vals) == numel, (name, len(vals), numel)
                f.write(struct.pack("<%d%s" % (numel, fmt[dt]), *vals))


def main():
    import torch
    import torch.nn.functional as F

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--mutants", action="store_true",
                    help="also write deliberately wrong references (mut_*.gtpfix, not committed) "
                         "to show the test fails: tied (LM-head part of wte's gradient dropped), "
                         "rope_sign (rotation by −angle), gqa (head h reads kv head h % NKV)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)  # deterministic CPU float64

    V, T, B, L, C, NH = (CFG[k] for k in ("vocab", "seq", "B", "n_layer", "n_embd", "n_head"))
    HS = C // NH
    eps, theta = CFG["norm_eps"], CFG["rope_theta"]

    jobs = [("gpt2", None), ("llama", None)]
    if args.mutants:
        jobs += [("gpt2", "tied"), ("llama", "rope_sign"), ("llama", "gqa")]
    for style, mutation in jobs:
        style_i, sc = list(STYLES).index(style), STYLES[style]
        llama = style == "llama"
        NKV, H = sc["n_kv_head"], sc["ffn_hidden"]
        g = torch.Generator().manual_seed(20261201 + style_i)

        def rnd(*shape, std, mean=0.0):
            # float32-representable values (rounded last), held in float64
            x = mean + torch.randn(*shape, generator=g, dtype=torch.float64) * std
            return x.float().double()

        w = {"wte.weight": rnd(V, C, std=0.3)}
        if not llama:
            w["wpe.weight"] = rnd(T, C, std=0.1)
        for l in range(L):
            p = f"h.{l}."
            for ln in ("ln1", "ln2"):
                w[p + ln + ".weight"] = rnd(C, std=0.1, mean=1.0)
                if not llama:
                    w[p + ln + ".bias"] = rnd(C, std=0.1)
            shapes = {"attn.q": (C, C), "attn.k": (NKV * HS, C), "attn.v": (NKV * HS, C),
                      "attn.o": (C, C), "mlp.fc": ((2 if llama else 1) * H, C),
                      "mlp.proj": (C, H)}
            for n, (o, i) in shapes.items():
                w[p + n + ".weight"] = rnd(o, i, std=1.0 / math.sqrt(i))
                if not llama:
                    w[p + n + ".bias"] = rnd(o, std=0.1)
        w["ln_f.weight"] = rnd(C, std=0.1, mean=1.0)
        if not llama:
            w["ln_f.bias"] = rnd(C, std=0.1)
        else:
            w["lm_head.weight"] = rnd(V, C, std=0.3)
        for t in w.values():
            assert torch.equal(t, t.float().double())  # gtp's f32 load is exact
            t.requires_grad_(True)

        tokens = torch.randint(0, V, (B, T), generator=g)
        targets = torch.randint(0, V, (B, T), generator=g)
        for t in IGNORED_POSITIONS:
            targets[:, t] = -1

        def norm(x, name):
            if llama:
                return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w[name + ".weight"]
            return F.layer_norm(x, (C,), w[name + ".weight"], w[name + ".bias"], eps)

        def lin(x, name):
            return F.linear(x, w[name + ".weight"], None if llama else w[name + ".bias"])

        pos = torch.arange(T, dtype=torch.float64)
        inv_freq = theta ** (-2.0 * torch.arange(HS // 2, dtype=torch.float64) / HS)
        ang = pos[:, None] * inv_freq[None, :]                # [T, HS/2]
        cos = torch.cat([ang.cos(), ang.cos()], -1)[None, :, None, :]  # [1, T, 1, HS]
        sin = torch.cat([ang.sin(), ang.sin()], -1)[None, :, None, :]

        def rope(x):  # x [B, T, heads, HS]
            x1, x2 = x[..., : HS // 2], x[..., HS // 2:]
            sign = -1.0 if mutation == "rope_sign" else 1.0
            return x * cos + torch.cat([-x2, x1], -1) * (sign * sin)

        causal = torch.ones(T, T, dtype=torch.bool).tril()

        def forward():
            x = w["wte.weight"][tokens]                       # [B, T, C]
            if not llama:
                x = x + w["wpe.weight"][:T]
            for l in range(L):
                p = f"h.{l}."
                h = norm(x, p + "ln1")
                q = lin(h, p + "attn.q").view(B, T, NH, HS)
                k = lin(h, p + "attn.k").view(B, T, NKV, HS)
                v = lin(h, p + "attn.v").view(B, T, NKV, HS)
                if llama:
                    q, k = rope(q), rope(k)
                if mutation == "gqa":
                    k, v = k.repeat(1, 1, NH // NKV, 1), v.repeat(1, 1, NH // NKV, 1)
                else:
                    k = k.repeat_interleave(NH // NKV, dim=2)  # head h → kv head h // group
                    v = v.repeat_interleave(NH // NKV, dim=2)
                q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, NH, T, HS]
                s = (q @ k.transpose(-1, -2)) / math.sqrt(HS)
                a = s.masked_fill(~causal, float("-inf")).softmax(-1)
                y = (a @ v).transpose(1, 2).reshape(B, T, C)
                x = x + lin(y, p + "attn.o")
                h = lin(norm(x, p + "ln2"), p + "mlp.fc")
                if llama:
                    gate, up = h.split(H, dim=-1)
                    h = F.silu(gate) * up
                else:
                    h = F.gelu(h, approximate="tanh")
                x = x + lin(h, p + "mlp.proj")
            hf = norm(x, "ln_f")
            head = w["lm_head.weight"] if llama else w["wte.weight"]
            if mutation == "tied":
                head = head.detach()
            return (hf @ head.t()).reshape(B * T, V)

        logits = forward()
        loss = F.cross_entropy(logits, targets.reshape(-1), ignore_index=-1, reduction="mean")
        loss.backward()
        grads = {k: t.grad.detach().clone() for k, t in w.items()}
        tag = style if mutation is None else f"mut_{mutation}_{style}"
        print(f"{tag}: loss {loss.item():.12f}, {sum(t.numel() for t in w.values())} params")

        # Float32 cross-check (informative): how far an f32 evaluation of the
        # same model sits from this reference.
        with torch.no_grad():
            w64 = {k: t.detach().clone() for k, t in w.items()}
            for k in w:
                w[k] = w64[k].float()
            cos, sin = cos.float(), sin.float()
            lf = forward().double()
            for k in w:
                w[k] = w64[k]
        rel = ((lf - logits.detach()).norm() / logits.detach().norm()).item()
        print(f"{tag}: f32 logits rel L2 vs f64 {rel:.2e}")

        meta = dict(style=style, mutation=mutation or "none", vocab=V, seq=T, B=B, n_layer=L, n_embd=C, n_head=NH,
                    n_kv_head=NKV, ffn_hidden=H, norm_eps=repr(eps), rope_theta=repr(theta),
                    torch=torch.__version__, command=" ".join([os.path.basename(sys.executable)] + sys.argv))
        text = "".join(f"{k}={v}\n" for k, v in meta.items()).encode()
        entries = [("meta", TEXT, [len(text)], text)]
        for name in sorted(w64):
            t = w64[name]
            entries.append((name, F32, list(t.shape), t.float().flatten().tolist()))
            gr = grads[name]
            entries.append(("grad." + name, F64, list(gr.shape), gr.flatten().tolist()))
        entries.append(("tokens", I32, [B, T], tokens.flatten().int().tolist()))
        entries.append(("targets", I32, [B, T], targets.flatten().int().tolist()))
        entries.append(("loss", F64, [1], [loss.item()]))
        entries.append(("logits", F64, [B * T, V], logits.detach().flatten().tolist()))
        path = os.path.join(args.out, tag + ".gtpfix")
        write_fixture(path, entries)
        print("wrote", path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()
