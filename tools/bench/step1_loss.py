#!/usr/bin/env python3
"""Step-1 loss of a bench work dir, recomputed in pure Python (f64, stdlib).

  python3 tools/bench/step1_loss.py WORK B T C NH L M

GPT-2 forward on WORK/init.safetensors (`ckpt export --names hf-gpt2` of the
iteration-0 checkpoint) over the first step's M micro-batches of
WORK/tokens.bin (train.dump_tokens): the mean of the micro-batch mean losses,
which must equal gtp's step-1 loss. Checks that the export, the dump and
torch_gpt.py's reading of both line up. Tiny shapes only (seconds at C=16).
"""
import array
import json
import math
import struct
import sys

W = sys.argv[1]
B, T, C, H, L, M = (int(v) for v in sys.argv[2:8])
d = open(W + "/init.safetensors", "rb").read()
n = struct.unpack("<Q", d[:8])[0]
hdr = json.loads(d[8:8 + n])
cache = {}


def get(k):
    if k not in cache:
        cache[k] = read(k)
    return cache[k]


def read(k):
    v = hdr[k]; b, e = v["data_offsets"]; a = array.array("f"); a.frombytes(d[8 + n + b:8 + n + e])
    shp = v["shape"]
    if len(shp) == 1: return list(a)
    return [list(a[i * shp[1]:(i + 1) * shp[1]]) for i in range(shp[0])]
wte, wpe = get("transformer.wte.weight"), get("transformer.wpe.weight")
def ln(x, w, b):
    mu = sum(x) / len(x); var = sum((t - mu) ** 2 for t in x) / len(x); r = 1 / math.sqrt(var + 1e-5)
    return [(t - mu) * r * w[i] + b[i] for i, t in enumerate(x)]
def mm(x, Wt, bias):  # x[in] @ W[in, out] + b
    out = list(bias)
    for i, xi in enumerate(x):
        row = Wt[i]
        for j in range(len(out)): out[j] += xi * row[j]
    return out
gelu = lambda x: 0.5 * x * (1 + math.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
toks = array.array("i"); toks.frombytes(open(W + "/tokens.bin", "rb").read())
total = 0
for m in range(M):
    base = m * 2 * B * T
    mb_loss = 0
    for b in range(B):
        tok = toks[base + b * T: base + (b + 1) * T]; tgt = toks[base + B * T + b * T: base + B * T + (b + 1) * T]
        x = [[wte[tok[t]][c] + wpe[t][c] for c in range(C)] for t in range(T)]
        for l in range(L):
            p = f"transformer.h.{l}."
            g = lambda k: get(p + k)
            h = [ln(xt, g("ln_1.weight"), g("ln_1.bias")) for xt in x]
            qkv = [mm(ht, g("attn.c_attn.weight"), g("attn.c_attn.bias")) for ht in h]
            HS = C // H; y = [[0.0] * C for _ in range(T)]
            for hh in range(H):
                for t in range(T):
                    q = qkv[t][hh * HS:(hh + 1) * HS]
                    s = [sum(q[i] * qkv[u][C + hh * HS + i] for i in range(HS)) / math.sqrt(HS) for u in range(t + 1)]
                    mx = max(s); e = [math.exp(v - mx) for v in s]; z = sum(e)
                    for i in range(HS): y[t][hh * HS + i] = sum(e[u] / z * qkv[u][2 * C + hh * HS + i] for u in range(t + 1))
            o = [mm(yt, g("attn.c_proj.weight"), g("attn.c_proj.bias")) for yt in y]
            x = [[x[t][c] + o[t][c] for c in range(C)] for t in range(T)]
            h = [ln(xt, g("ln_2.weight"), g("ln_2.bias")) for xt in x]
            f = [[gelu(v) for v in mm(ht, g("mlp.c_fc.weight"), g("mlp.c_fc.bias"))] for ht in h]
            o = [mm(ft, g("mlp.c_proj.weight"), g("mlp.c_proj.bias")) for ft in f]
            x = [[x[t][c] + o[t][c] for c in range(C)] for t in range(T)]
        for t in range(T):
            hf = ln(x[t], get("transformer.ln_f.weight"), get("transformer.ln_f.bias"))
            logits = [sum(hf[c] * wte[v][c] for c in range(C)) for v in range(len(wte))]
            mx = max(logits); lse = mx + math.log(sum(math.exp(v - mx) for v in logits))
            mb_loss += (lse - logits[tgt[t]]) / (B * T)
    total += mb_loss / M
print("%.6f" % total)
