#!/usr/bin/env python3
"""Loads a `ckpt export --format hf` directory with transformers'
AutoModelForCausalLM.from_pretrained and checks it computes what gtp's model
computes: for GPT-2, its logits on random tokens against tools/bench/
torch_gpt.py's own GPT (which shares no code with transformers) built from the
same safetensors; for Llama, finite logits of the right shape. Needs torch and
transformers (the GPU machine has both).

  python3 tools/ckpt/hf_check.py <hf dir> [<hf dir> ...]
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))


def main():
    from transformers import AutoModelForCausalLM
    ok = True
    for d in sys.argv[1:]:
        cfg = json.load(open(os.path.join(d, "config.json")))
        hf = AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32).eval()
        V = cfg["vocab_size"]
        T = cfg.get("n_positions", cfg.get("max_position_embeddings"))
        torch.manual_seed(0)
        idx = torch.randint(0, V, (2, T))
        with torch.no_grad():
            logits = hf(idx).logits
        if not torch.isfinite(logits).all() or list(logits.shape) != [2, T, V]:
            print(f"{d}: bad logits {list(logits.shape)}")
            ok = False
            continue
        if cfg["model_type"] == "gpt2":
            import torch_gpt
            L, C, H = cfg["n_layer"], cfg["n_embd"], cfg["n_head"]
            ours = torch_gpt.GPT(V, T, L, C, H)
            torch_gpt.load_hf_gpt2(ours, torch_gpt.read_safetensors(os.path.join(d, "model.safetensors")), L)
            ours.eval()
            with torch.no_grad():
                x = ours.wte(idx) + ours.wpe(torch.arange(T))
                for b in ours.h:
                    x = b(x)
                ref = ours.ln_f(x) @ ours.wte.weight.t()
            err = (logits - ref).abs().max().item() / ref.abs().max().item()
            print(f"{d}: GPT2LMHeadModel loaded; logits vs an independent GPT: max rel. error {err:.2e}")
            ok &= err < 1e-5
        else:
            print(f"{d}: {cfg['architectures'][0]} loaded; logits finite, shape {list(logits.shape)}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
