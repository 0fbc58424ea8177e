#!/usr/bin/env python3
"""Loads a `ckpt export --format hf` directory with transformers'
AutoModelForCausalLM.from_pretrained and checks it computes what gtp's model
computes: for GPT-2, its logits on random tokens against tools/bench/
torch_gpt.py's own GPT (which shares no code with transformers) built from the
same safetensors; for Llama, finite logits of the right shape. Needs torch and
transformers (the GPU machine has both).

A directory with a tokenizer (a BPE run's export: vocab.json, merges.txt,
tokenizer_config.json) is also loaded with AutoTokenizer.from_pretrained, and
every line of --text must encode to the ids gtp's //data/tokenizer:tokenize
gives with the directory's vocab.json/merges.txt (and decode back to the line).

  bazel build //data/tokenizer:tokenize
  python3 tools/ckpt/hf_check.py [--tokenize bazel-bin/data/tokenizer/tokenize]
      [--text data/tokenizer/testdata/hf_text.txt] <hf dir> [<hf dir> ...]
"""
import argparse
import json
import os
import subprocess
import sys

import torch

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "bench"))


def check_tokenizer(d, tokenize, text):
    """AutoTokenizer on `d` against gtp's tokenize binary, line by line."""
    from transformers import AutoTokenizer
    if not os.path.exists(tokenize):
        print(f"{d}: no {tokenize}: run `bazel build //data/tokenizer:tokenize` or pass --tokenize")
        return False
    hf = AutoTokenizer.from_pretrained(d)
    data = open(text, "rb").read()
    out = subprocess.run([tokenize, f"--vocab={d}/vocab.json", f"--merges={d}/merges.txt"],
                         input=data, capture_output=True, check=True).stdout.decode()
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    ours = [[int(x) for x in row.split()] for row in out.split("\n")[:len(lines)]]
    bad = 0
    for i, (raw, want) in enumerate(zip(lines, ours)):
        line = raw.decode("utf-8")
        got = hf(line, add_special_tokens=False)["input_ids"]
        back = hf.decode(got)
        if got != want or back != line:
            bad += 1
            if bad <= 3:
                print(f"{d}: line {i + 1}: AutoTokenizer {got[:12]}... vs gtp {want[:12]}...; "
                      f"decodes back: {back == line}")
    eos = hf.eos_token_id
    print(f"{d}: AutoTokenizer ({type(hf).__name__}, vocab {len(hf)}, eos {eos}): "
          f"{len(lines) - bad}/{len(lines)} lines of {text} encode as gtp's tokenize and decode back")
    return bad == 0 and len(lines) > 0 and hf.convert_ids_to_tokens(eos) == "<|endoftext|>"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenize", default=os.path.join(ROOT, "bazel-bin", "data", "tokenizer", "tokenize"))
    ap.add_argument("--text", default=os.path.join(ROOT, "data", "tokenizer", "testdata", "hf_text.txt"))
    ap.add_argument("dirs", nargs="+")
    args = ap.parse_args()
    from transformers import AutoModelForCausalLM
    ok = True
    for d in args.dirs:
        if os.path.exists(os.path.join(d, "vocab.json")):
            ok &= check_tokenizer(d, args.tokenize, args.text)
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
