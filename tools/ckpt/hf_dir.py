#!/usr/bin/env python3
"""Hand-made Hugging Face model directories for //tools/ckpt:hf_import_test,
and the comparison of an exported directory with its source. Standard
library only: safetensors written and parsed from the public spec (u64
header length, JSON header, raw little-endian data), names and layouts from
transformers' GPT2LMHeadModel (Conv1D weights [in, out], fused c_attn) and
LlamaForCausalLM ([out, in] Linear weights, split gate/up) — not from gtp.

  hf_dir.py make gpt2|llama <out dir> [--sharded] [--bf16]
  hf_dir.py compare <source dir> <exported dir>   # every tensor, byte for byte; config values
"""
import json
import os
import random
import struct
import sys


def write_safetensors(path, tensors, dtype="F32"):
    """tensors: {name: (shape, list of floats)}; F32, or BF16 (values truncated)."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        shape, vals = tensors[name]
        if dtype == "F32":
            data = struct.pack("<%df" % len(vals), *vals)
        else:
            bits = struct.unpack("<%dI" % len(vals), struct.pack("<%df" % len(vals), *vals))
            data = struct.pack("<%dH" % len(vals), *[b >> 16 for b in bits])
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_safetensors(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    h = json.loads(data[8:8 + n])
    return {k: (v["dtype"], v["shape"], data[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in h.items() if k != "__metadata__"}


def read_dir(d):
    if os.path.exists(os.path.join(d, "model.safetensors")):
        return read_safetensors(os.path.join(d, "model.safetensors"))
    index = json.load(open(os.path.join(d, "model.safetensors.index.json")))
    out = {}
    for f in sorted(set(index["weight_map"].values())):
        out.update(read_safetensors(os.path.join(d, f)))
    return out


def rand(shape, rng):
    n = 1
    for s in shape:
        n *= s
    return (shape, [rng.gauss(0.0, 0.5) for _ in range(n)])


def make(style, out, sharded, bf16):
    rng = random.Random(18)
    os.makedirs(out, exist_ok=True)
    V, C, L, NH, T = 100, 32, 2, 4, 16  # V pads to 128 in gtp
    t = {}
    if style == "gpt2":
        F = 64  # not 4·C: n_inner is read, not assumed
        cfg = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": V,
               "n_positions": T, "n_ctx": T, "n_embd": C, "n_layer": L, "n_head": NH, "n_inner": F,
               "activation_function": "gelu_new", "layer_norm_epsilon": 1e-05,
               "initializer_range": 0.01, "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1,
               "bos_token_id": 0, "eos_token_id": 0, "scale_attn_weights": True,
               "summary_type": "cls_index", "use_cache": True, "transformers_version": "4.44.0"}
        p = "transformer."
        t[p + "wte.weight"] = rand([V, C], rng)
        t[p + "wpe.weight"] = rand([T, C], rng)
        for l in range(L):
            h = "%sh.%d." % (p, l)
            for n, s in (("attn.c_attn", [C, 3 * C]), ("attn.c_proj", [C, C]), ("mlp.c_fc", [C, F]),
                         ("mlp.c_proj", [F, C])):
                t[h + n + ".weight"] = rand(s, rng)
                t[h + n + ".bias"] = rand([s[1]], rng)
            for n in ("ln_1", "ln_2"):
                t[h + n + ".weight"] = rand([C], rng)
                t[h + n + ".bias"] = rand([C], rng)
            # Older GPT-2 files carry the causal mask as a buffer: not a weight.
            t[h + "attn.bias"] = ([1, 1, T, T], [1.0 if j <= i else 0.0 for i in range(T) for j in range(T)])
        t[p + "ln_f.weight"] = rand([C], rng)
        t[p + "ln_f.bias"] = rand([C], rng)
    else:
        F, KV = 48, 2
        HS = C // NH
        cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V,
               "hidden_size": C, "intermediate_size": F, "num_hidden_layers": L,
               "num_attention_heads": NH, "num_key_value_heads": KV, "max_position_embeddings": T,
               "rms_norm_eps": 1e-06, "rope_theta": 500000.0, "rope_scaling": None,
               "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
               "tie_word_embeddings": False, "initializer_range": 0.02, "bos_token_id": 1,
               "eos_token_id": 2, "pretraining_tp": 1, "use_cache": True, "torch_dtype": "float32"}
        t["model.embed_tokens.weight"] = rand([V, C], rng)
        t["lm_head.weight"] = rand([V, C], rng)
        t["model.norm.weight"] = rand([C], rng)
        for l in range(L):
            h = "model.layers.%d." % l
            for n, s in (("self_attn.q_proj", [C, C]), ("self_attn.k_proj", [KV * HS, C]),
                         ("self_attn.v_proj", [KV * HS, C]), ("self_attn.o_proj", [C, C]),
                         ("mlp.gate_proj", [F, C]), ("mlp.up_proj", [F, C]), ("mlp.down_proj", [C, F])):
                t[h + n + ".weight"] = rand(s, rng)
            t[h + "input_layernorm.weight"] = rand([C], rng)
            t[h + "post_attention_layernorm.weight"] = rand([C], rng)
            t[h + "self_attn.rotary_emb.inv_freq"] = rand([HS // 2], rng)  # a buffer, not a weight
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=2)
    dtype = "BF16" if bf16 else "F32"
    if not sharded:
        write_safetensors(os.path.join(out, "model.safetensors"), t, dtype)
        return
    names = sorted(t)
    parts = [names[:len(names) // 2], names[len(names) // 2:]]
    weight_map = {}
    for i, part in enumerate(parts):
        f = "model-%05d-of-%05d.safetensors" % (i + 1, len(parts))
        write_safetensors(os.path.join(out, f), {n: t[n] for n in part}, dtype)
        weight_map.update({n: f for n in part})
    json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map},
              open(os.path.join(out, "model.safetensors.index.json"), "w"))


def widen(dtype, data):
    if dtype == "F32":
        return data
    bits = struct.unpack("<%dH" % (len(data) // 2), data)
    return struct.pack("<%dI" % len(bits), *[b << 16 for b in bits])


def compare(src, exported):
    a, b = read_dir(src), read_dir(exported)
    buffers = {k for k in a if k.endswith(".attn.bias") or k.endswith("rotary_emb.inv_freq")}
    weights = set(a) - buffers
    assert set(b) == weights, ("tensor names differ", sorted(set(b) ^ weights))
    for k in sorted(weights):
        assert b[k][0] == "F32", (k, b[k][0])
        assert a[k][1] == b[k][1], (k, "shape", a[k][1], b[k][1])
        assert widen(a[k][0], a[k][2]) == b[k][2], (k, "bytes differ")
    ca = json.load(open(os.path.join(src, "config.json")))
    cb = json.load(open(os.path.join(exported, "config.json")))
    # What export writes must say what the source said; a field the source
    # leaves to transformers' default must be that default.
    defaults = {"head_dim": ca.get("hidden_size", 0) // max(1, ca.get("num_attention_heads", 1)),
                "tie_word_embeddings": ca.get("model_type") == "gpt2", "torch_dtype": "float32",
                "n_ctx": ca.get("n_positions"), "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}
    for k, v in cb.items():
        if k in ("resid_pdrop", "embd_pdrop", "attn_pdrop"):
            continue  # gtp trains without dropout; export says so
        want = ca.get(k, defaults.get(k))
        assert want == v, ("config.json", k, want, v)
    print("ok: %s → %s: %d tensors identical, %d config fields equal" % (src, exported, len(weights), len(cb)))


def main():
    if sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3], "--sharded" in sys.argv, "--bf16" in sys.argv)
    elif sys.argv[1] == "compare":
        compare(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
