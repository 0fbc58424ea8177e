#!/usr/bin/env python3
"""Hugging Face end to end with transformers-made models (GPU machine: torch
and transformers are installed there, not here). For each of a GPT-2 (GPT-2
BPE vocab.json/merges.txt with <|endoftext|>), a Llama (tokenizer.json,
Llama-3 style, GQA, untied embeddings) and a Mistral (MistralForCausalLM, no
sliding window, a SentencePiece tokenizer.model: Llama-2's BPE with byte
fallback) made by transformers with random weights and save_pretrained:

  1. ckpt import --format hf  DIR -> gtp checkpoint (weights only)
  2. ckpt export --format hf  of the import: every tensor equal to transformers'
  3. make_indexed with the model's own tokenizer on the multilingual fixture text
  4. fine-tune 20 steps: the trainer with checkpoint.init_from + init_model
     (the model taken from the checkpoint, nothing retyped), f32 on the CPU
  5. generate greedily (temperature 0) from the run's checkpoint
  6. ckpt export --format hf of the run; transformers loads it and generates
     greedily from the same prompt ids: the continuations must be equal

  python3 tools/hf/hf_e2e.py --bin /tmp/gtp_bundle/bin --work /tmp/hf_e2e
Prints PASS/FAIL per model and step; exits 1 on any FAIL.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
TEXT = os.path.join(ROOT, "data/tokenizer/testdata/hf_json/text.txt")
# GPT-2 BPE files (transformers 5's save_pretrained writes tokenizer.json only).
HF = os.path.join(ROOT, "data/tokenizer/testdata/hf")
SPM = os.path.join(ROOT, "data/tokenizer/testdata/spm/bpe.model")  # Llama-2's trainer settings
PROMPT = "The cat sat on the"
fails = []


def run(cmd, input=None):
    # Bytes, decoded by hand: text=True would turn a generated "\r" into "\n".
    r = subprocess.run(cmd, capture_output=True, input=None if input is None else input.encode())
    r.stdout = r.stdout.decode("utf-8", errors="replace")
    r.stderr = r.stderr.decode("utf-8", errors="replace")
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])}…: exit {r.returncode}\n{r.stdout[-1500:]}\n{r.stderr[-1500:]}")
    return r


def check(name, ok, detail=""):
    print(f"{'PASS' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)
    if not ok:
        fails.append(name)


def make_models(work):
    import torch
    from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM,
                              MistralConfig, MistralForCausalLM, PreTrainedTokenizerFast)
    torch.manual_seed(0)
    # GPT-2: the fixture's vocab.json + merges.txt with <|endoftext|> at id 2000
    # as GPT-2's own files have it (in the vocab, and a special added token), as
    # files for gtp and as a tokenizer.json for transformers (transformers 5
    # builds GPT2TokenizerFast from a tokenizer.json).
    d = os.path.join(work, "gpt2")
    vocab = json.load(open(os.path.join(HF, "vocab.json"), encoding="utf-8"))
    eot = len(vocab)
    vocab["<|endoftext|>"] = eot
    with open(os.path.join(work, "gpt2_vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    tj = json.load(open(os.path.join(ROOT, "data/tokenizer/testdata/hf_json/gpt2_hf.json"), encoding="utf-8"))
    tj["model"]["vocab"]["<|endoftext|>"] = eot
    tj["added_tokens"] = [{"id": eot, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                           "rstrip": False, "normalized": False, "special": True}]
    with open(os.path.join(work, "gpt2_tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False)
    tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(work, "gpt2_tokenizer.json"),
                                  bos_token="<|endoftext|>", eos_token="<|endoftext|>")
    m = GPT2LMHeadModel(GPT2Config(vocab_size=eot + 1, n_positions=64, n_embd=64, n_layer=2, n_head=4,
                                   bos_token_id=eot, eos_token_id=eot))
    m.save_pretrained(d, safe_serialization=True)
    tok.save_pretrained(d)
    d = os.path.join(work, "llama")
    js = os.path.join(ROOT, "data/tokenizer/testdata/hf_json/llama3_style.json")
    tok = PreTrainedTokenizerFast(tokenizer_file=js, bos_token="<|begin_of_text|>",
                                  eos_token="<|end_of_text|>")
    m = LlamaForCausalLM(LlamaConfig(vocab_size=272, hidden_size=64, intermediate_size=128,
                                     num_hidden_layers=2, num_attention_heads=4,
                                     num_key_value_heads=2, max_position_embeddings=64,
                                     tie_word_embeddings=False, rope_theta=10000.0,
                                     rms_norm_eps=1e-5))
    m.save_pretrained(d, safe_serialization=True)
    tok.save_pretrained(d)
    shutil.copy(js, os.path.join(d, "tokenizer.json"))
    # Mistral: the directory a Mistral-7B-v0.1 download looks like, small:
    # MistralForCausalLM with sliding_window null, tokenizer.model + a
    # LlamaTokenizer config (no BOS added: gtp's data has none either).
    d = os.path.join(work, "mistral")
    m = MistralForCausalLM(MistralConfig(vocab_size=800, hidden_size=64, intermediate_size=128,
                                         num_hidden_layers=2, num_attention_heads=4,
                                         num_key_value_heads=2, max_position_embeddings=64,
                                         sliding_window=None, tie_word_embeddings=False,
                                         rope_theta=10000.0, rms_norm_eps=1e-6,
                                         bos_token_id=1, eos_token_id=2))
    m.save_pretrained(d, safe_serialization=True)
    shutil.copy(SPM, os.path.join(d, "tokenizer.model"))
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>",
                   "unk_token": "<unk>", "add_bos_token": False, "add_eos_token": False,
                   "legacy": True, "model_max_length": 64}, f)


def same_tensors(a, b):
    from safetensors.numpy import load_file
    x, y = load_file(os.path.join(a, "model.safetensors")), load_file(os.path.join(b, "model.safetensors"))
    missing = sorted(set(x) - set(y))
    bad = [k for k in x if k in y and not (x[k].shape == y[k].shape and (x[k] == y[k]).all())]
    return missing, bad


def hf_greedy(d, prompt_ids, n):
    import torch
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32).eval()
    out = m.generate(torch.tensor([prompt_ids]), max_new_tokens=n, do_sample=False,
                     pad_token_id=0, eos_token_id=None)
    return out[0, len(prompt_ids):].tolist()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="folder of the bundle's binaries")
    ap.add_argument("--work", default="/tmp/hf_e2e")
    a = ap.parse_args()
    b = lambda n: os.path.join(a.bin, n)
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    make_models(a.work)
    from transformers import AutoTokenizer
    w = a.work
    for name, tok_flags, data_tok, eod in [
        ("gpt2", [f"--vocab={w}/gpt2_vocab.json", f"--merges={HF}/merges.txt"],
         f"data.tokenizer_vocab={w}/gpt2_vocab.json,data.tokenizer_merges={HF}/merges.txt",
         "<|endoftext|>"),
        ("llama", [f"--tokenizer_json={w}/llama/tokenizer.json"],
         f"data.tokenizer_json={w}/llama/tokenizer.json", "<|end_of_text|>"),
        ("mistral", [f"--tokenizer_model={w}/mistral/tokenizer.model"],
         f"data.tokenizer_model={w}/mistral/tokenizer.model", "</s>")]:
        d = os.path.join(a.work, name)
        try:
            run([b("tools_ckpt_ckpt"), "import", "--format", "hf", d, f"{d}.gtp"])
            run([b("tools_ckpt_ckpt"), "export", "--format", "hf", f"{d}.gtp", f"{d}.back"])
            missing, bad = same_tensors(d, f"{d}.back")
            check(f"{name}: import → export keeps every tensor", not missing and not bad,
                  f"missing {missing[:4]}, different {bad[:4]}" if missing or bad else "")
            data = f"{d}.data/text"
            os.makedirs(os.path.dirname(data))
            eod_flags = ["--append_eod", f"--eod_token={eod}"]
            run([b("tools_data_make_indexed"), *tok_flags, "--documents=line", *eod_flags,
                 f"--output={data}", TEXT])
            sets = ",".join([
                "data.source=indexed", f"data.path={data}", data_tok, "data.valid_fraction=0.1",
                f"checkpoint.init_from={d}.gtp", "checkpoint.init_model=true",
                "train.steps=20", "train.micro_batch=4", "train.global_batch=8", "train.eval_every=0",
                "train.log_every=5", "train.device=cpu", "train.precision=f32",
                "parallel.world_size=1", "parallel.tp=1", "parallel.tp_num_weight_shards=1",
                "optim.lr=1e-3", "optim.warmup_steps=2"])
            r = run([b("recipes_gpt_124m_train"), "--config", os.path.join(ROOT, "recipes/gpt_124m/gpt_124m.pbtxt"),
                     "--noprogress", "--run_dir", f"{d}.run", "--set", sets])
            losses = [json.loads(l)["loss"] for l in open(f"{d}.run/metrics.jsonl") if '"loss"' in l]
            check(f"{name}: fine-tuned from the import", len(losses) >= 2 and losses[-1] < losses[0],
                  f"loss {losses[0]:.3f} → {losses[-1]:.3f}" if losses else r.stdout[-300:])
            g = run([b("tools_generate_generate"), "--checkpoint", f"{d}.run/checkpoints", "--prompt", PROMPT,
                     "--max_tokens", "12", "--temperature", "0"])
            gtp_text = g.stdout.split("\ngenerated ")[0]
            run([b("tools_ckpt_ckpt"), "export", "--format", "hf", f"{d}.run/checkpoints", f"{d}.out"])
            tok = AutoTokenizer.from_pretrained(f"{d}.out")
            # The exported tokenizer in transformers against gtp's, line by line
            # on the multilingual fixture. Where the files' own library is not
            # HF, gtp follows that library and two departures of HF's are
            # counted apart (data/tokenizer/README.md): HF matches special
            # tokens typed in the text (GPT-2's <|endoftext|>; SentencePiece's
            # control pieces <s>, </s>, <unk>), which GPT-2's encoder.py and
            # sentencepiece spell out; and transformers 5, converting a
            # tokenizer.model itself, drops the dummy prefix on text that
            # starts with whitespace.
            lines = open(TEXT, encoding="utf-8").read().split("\n")[:-1]
            ours = [[int(x) for x in r.split()] for r in
                    run([b("data_tokenizer_tokenize"), *tok_flags], input="\n".join(lines) + "\n")
                    .stdout.split("\n")[:len(lines)]]
            diff = [i for i, l in enumerate(lines) if tok.encode(l, add_special_tokens=False) != ours[i]]
            typed = {"gpt2": ["<|endoftext|>"], "mistral": ["<s>", "</s>", "<unk>"]}.get(name, [])
            special = [i for i in diff if any(t in lines[i] for t in typed)]
            lead = [i for i in diff if name == "mistral" and i not in special and lines[i][:1].isspace()]
            rest = [i for i in diff if i not in lead and i not in special]
            apart = ", ".join(x for x in [
                f"{len(special)} with {'/'.join(typed)} typed in the text" if special else "",
                f"{len(lead)} that start with whitespace (the dummy prefix)" if lead else ""] if x)
            check(f"{name}: AutoTokenizer ids == gtp ids on {len(lines)} lines", not rest,
                  (f"differ as documented: {apart}" if apart else "")
                  + (f"; {len(rest)} other lines differ, line {rest[0]}: {lines[rest[0]]!r} transformers "
                     f"{tok.encode(lines[rest[0]], add_special_tokens=False)} gtp {ours[rest[0]]}" if rest else ""))
            ids = tok.encode(PROMPT, add_special_tokens=False)
            cont = hf_greedy(f"{d}.out", ids, 12)
            hf_text = tok.decode(ids + cont, clean_up_tokenization_spaces=False)
            same = gtp_text.startswith(hf_text) or hf_text.startswith(gtp_text)
            detail = f"gtp {gtp_text!r} transformers {hf_text!r}"
            if not same:  # ids, to tell a decode difference from a model difference
                mine = run([b("data_tokenizer_tokenize"), *tok_flags], input=gtp_text + "\n").stdout.split()
                back = run([b("data_tokenizer_tokenize"), *tok_flags, "--decode"],
                           input=" ".join(map(str, ids + cont)) + "\n").stdout
                detail += (f"; transformers ids {ids + cont}, its tokens {tok.convert_ids_to_tokens(ids + cont)}"
                           f"; gtp's text encoded by gtp {mine}; transformers' ids decoded by gtp {back!r}")
            check(f"{name}: gtp generate == transformers generate (greedy, 12 tokens)", same, detail)
        except Exception as e:  # one model's failure does not hide the other's
            check(f"{name}: end to end", False, str(e)[:2500])
    print("hf_e2e:", "FAIL" if fails else "PASS")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
