#!/usr/bin/env python3
"""Plain-PyTorch GPT-2 reference for //layers:gpt2_compat_test.

Builds a small GPT-2 (the real architecture: LayerNorm, GELU-tanh, learned
positions, tied embeddings, biases, Conv1D-style fused c_attn) with seeded
random weights, runs its forward in float64 on the CPU (the fixture) and in
float32 on the GPU (the cross-check), and writes the weights in gtp's naming
and layout ([out, in]), the tokens, targets, logits and mean loss to a
safetensors file:

  python3 tools/reference/gpt2_reference.py --out layers/testdata/gpt2_small.safetensors

Vocabulary 500 is deliberately not a multiple of 128, so gtp's vocabulary
padding is exercised. Run on the GPU machine (PyTorch is there); the fixture
is committed so CI checks it without PyTorch.
"""
import argparse
import json
import math
import struct

import torch

CFG = dict(vocab=500, n_pos=32, n_embd=64, n_head=4, n_layer=2, B=2, T=16)


def make_weights(g):
    C, V, L = CFG["n_embd"], CFG["vocab"], CFG["n_layer"]
    r = lambda *s, std=0.02: torch.randn(*s, generator=g, dtype=torch.float64) * std
    w = {"wte": r(V, C), "wpe": r(CFG["n_pos"], C, std=0.01),
         "ln_f.w": 1 + r(C, std=0.1), "ln_f.b": r(C, std=0.1)}
    for i in range(L):
        p = f"h.{i}."
        w[p + "ln_1.w"], w[p + "ln_1.b"] = 1 + r(C, std=0.1), r(C, std=0.1)
        w[p + "c_attn.w"], w[p + "c_attn.b"] = r(C, 3 * C), r(3 * C)      # Conv1D: [in, out]
        w[p + "c_proj.w"], w[p + "c_proj.b"] = r(C, C), r(C)
        w[p + "ln_2.w"], w[p + "ln_2.b"] = 1 + r(C, std=0.1), r(C, std=0.1)
        w[p + "c_fc.w"], w[p + "c_fc.b"] = r(C, 4 * C), r(4 * C)
        w[p + "mlp_proj.w"], w[p + "mlp_proj.b"] = r(4 * C, C), r(C)
    return w


def gpt2_forward(w, tok):
    """GPT-2 as in the original (HF GPT2LMHeadModel without dropout)."""
    B, T = tok.shape
    C, H = CFG["n_embd"], CFG["n_head"]
    x = w["wte"][tok] + w["wpe"][torch.arange(T, device=tok.device)]
    ln = lambda x, p: torch.nn.functional.layer_norm(x, (C,), w[p + ".w"], w[p + ".b"], 1e-5)
    gelu = lambda x: 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    mask = torch.ones(T, T, dtype=torch.bool, device=tok.device).tril()
    for i in range(CFG["n_layer"]):
        p = f"h.{i}."
        qkv = ln(x, p + "ln_1") @ w[p + "c_attn.w"] + w[p + "c_attn.b"]
        q, k, v = qkv.split(C, dim=-1)
        heads = lambda t: t.view(B, T, H, C // H).transpose(1, 2)
        q, k, v = heads(q), heads(k), heads(v)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(C // H)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ w[p + "c_proj.w"] + w[p + "c_proj.b"]
        h = gelu(ln(x, p + "ln_2") @ w[p + "c_fc.w"] + w[p + "c_fc.b"])
        x = x + h @ w[p + "mlp_proj.w"] + w[p + "mlp_proj.b"]
    return ln(x, "ln_f") @ w["wte"].t()  # tied LM head


def to_gtp(w):
    """gtp names and [out, in] layout (Conv1D weights are [in, out])."""
    C = CFG["n_embd"]
    out = {"wte.weight": w["wte"], "wpe.weight": w["wpe"],
           "ln_f.weight": w["ln_f.w"], "ln_f.bias": w["ln_f.b"]}
    for i in range(CFG["n_layer"]):
        p, q = f"h.{i}.", f"h.{i}."
        out[q + "ln1.weight"], out[q + "ln1.bias"] = w[p + "ln_1.w"], w[p + "ln_1.b"]
        wa, ba = w[p + "c_attn.w"].t(), w[p + "c_attn.b"]
        for j, n in enumerate("qkv"):
            out[q + f"attn.{n}.weight"] = wa[j * C:(j + 1) * C]
            out[q + f"attn.{n}.bias"] = ba[j * C:(j + 1) * C]
        out[q + "attn.o.weight"], out[q + "attn.o.bias"] = w[p + "c_proj.w"].t(), w[p + "c_proj.b"]
        out[q + "ln2.weight"], out[q + "ln2.bias"] = w[p + "ln_2.w"], w[p + "ln_2.b"]
        out[q + "mlp.fc.weight"], out[q + "mlp.fc.bias"] = w[p + "c_fc.w"].t(), w[p + "c_fc.b"]
        out[q + "mlp.proj.weight"], out[q + "mlp.proj.bias"] = w[p + "mlp_proj.w"].t(), w[p + "mlp_proj.b"]
    return out


def write_safetensors(path, tensors, metadata):
    header, blobs, off = {"__metadata__": metadata}, [], 0
    for name in sorted(tensors):
        t = tensors[name].contiguous().cpu()
        dt = {torch.float32: "F32", torch.int32: "I32"}[t.dtype]
        b = t.numpy().tobytes()
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    g = torch.Generator().manual_seed(1234)
    w = make_weights(g)
    # Round weights to f32 first so the f64 reference sees exactly what gtp loads.
    w = {k: v.float().double() for k, v in w.items()}
    B, T, V = CFG["B"], CFG["T"], CFG["vocab"]
    seq = torch.randint(0, V, (B, T + 1), generator=g)
    tok, tgt = seq[:, :-1], seq[:, 1:]
    logits = gpt2_forward(w, tok)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1))
    print(f"f64 cpu: loss {loss.item():.10f}")
    if torch.cuda.is_available():
        wg = {k: v.float().cuda() for k, v in w.items()}
        lg = gpt2_forward(wg, tok.cuda())
        err = ((lg.double().cpu() - logits).norm() / logits.norm()).item()
        lossg = torch.nn.functional.cross_entropy(lg.reshape(-1, V), tgt.reshape(-1).cuda())
        print(f"f32 {torch.cuda.get_device_name()}: loss {lossg.item():.10f}, "
              f"logits rel err vs f64 {err:.2e}")
    out = {k: v.float() for k, v in to_gtp(w).items()}
    out["tokens"] = tok.int()
    out["targets"] = tgt.int()
    out["logits"] = logits.reshape(B * T, V).float()
    out["loss"] = loss.reshape(1).float()
    meta = {k: str(v) for k, v in CFG.items()}
    meta["torch"] = torch.__version__
    write_safetensors(args.out, out, meta)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
