#!/usr/bin/env python3
"""Independent check of `ckpt export --names hf-gpt2`: parses the safetensors
file from its public spec (u64 header length, JSON header, data offsets) with
nothing but the standard library, and compares every tensor with the PyTorch
fixture it came from (through a TP2·GTP2 checkpoint)."""
import json
import struct
import sys


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        assert e["dtype"] in ("F32", "I32"), e
        fmt = "<%d%s" % ((end - b) // 4, "f" if e["dtype"] == "F32" else "i")
        vals = struct.unpack(fmt, data[base + b:base + end])
        count = 1
        for d in e["shape"]:
            count *= d
        assert count == len(vals), (name, e["shape"], len(vals))
        out[name] = (e["shape"], vals)
    return out


def main():
    exported, fixture = read(sys.argv[1]), read(sys.argv[2])
    C = fixture["wpe.weight"][0][1]
    V = fixture["wte.weight"][0][0]
    def T(shape_vals):  # [out, in] -> [in, out]
        (r, c), v = shape_vals
        return [v[i * c + j] for j in range(c) for i in range(r)]
    assert exported["transformer.wte.weight"] == fixture["wte.weight"], "wte"
    assert exported["transformer.wpe.weight"] == fixture["wpe.weight"], "wpe"
    L = sum(1 for k in fixture if k.endswith("attn.q.weight"))
    for l in range(L):
        h, p = "transformer.h.%d." % l, "h.%d." % l
        shape, attn = exported[h + "attn.c_attn.weight"]
        assert shape == [C, 3 * C], shape
        for j, x in enumerate("qkv"):
            part = [attn[i * 3 * C + j * C + k] for i in range(C) for k in range(C)]
            assert part == T(fixture[p + "attn.%s.weight" % x]), (l, x)
        for ours, theirs in (("attn.o", "attn.c_proj"), ("mlp.fc", "mlp.c_fc"), ("mlp.proj", "mlp.c_proj")):
            assert list(exported[h + theirs + ".weight"][1]) == T(fixture[p + ours + ".weight"]), (l, ours)
            assert exported[h + theirs + ".bias"][1] == fixture[p + ours + ".bias"][1], (l, ours)
        for ours, theirs in (("ln1", "ln_1"), ("ln2", "ln_2")):
            for n in ("weight", "bias"):
                assert exported[h + theirs + "." + n][1] == fixture[p + ours + "." + n][1]
    assert exported["transformer.ln_f.weight"][1] == fixture["ln_f.weight"][1]
    print("ok: %d tensors, vocab %d, %d layers" % (len(exported), V, L))


main()
