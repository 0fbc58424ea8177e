#!/usr/bin/env bash
# `ckpt export --format hf` writes a Hugging Face model directory from a
# trainer checkpoint: GPT-2 (gpt_tiny's shape) and Llama-style, each with a
# config.json that describes the run's model and a model.safetensors whose
# names and shapes are the HF model's. (tools/ckpt/hf_check.py loads such a
# directory with transformers on the GPU machine.)
set -euo pipefail
train="$1" ckpt="$2"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
base="model.n_layer=2,model.seq_len=32,train.steps=2,train.micro_batch=2,train.global_batch=4,train.eval_every=0"
"$train" --run_dir "$tmp/gpt2" --set "$base" > /dev/null
"$train" --run_dir "$tmp/llama" --set "$base,model.rope=true,model.norm=rmsnorm,model.activation=swiglu,model.no_bias=true,model.untied_embeddings=true,model.n_kv_head=2" > /dev/null
"$ckpt" export --format hf "$tmp/gpt2/checkpoints" "$tmp/hf_gpt2"
"$ckpt" export --format hf "$tmp/llama/checkpoints" "$tmp/hf_llama"
python3 - "$tmp/hf_gpt2" "$tmp/hf_llama" <<'PY'
import json, struct, sys
def read(p):
    d = open(p, "rb").read()
    n = struct.unpack("<Q", d[:8])[0]
    return {k: v["shape"] for k, v in json.loads(d[8:8 + n]).items() if k != "__metadata__"}
g = json.load(open(sys.argv[1] + "/config.json"))
assert g["model_type"] == "gpt2" and g["architectures"] == ["GPT2LMHeadModel"], g
assert (g["vocab_size"], g["n_positions"], g["n_embd"], g["n_layer"], g["n_head"], g["n_inner"]) == \
    (256, 32, 64, 2, 4, 256), g
assert g["activation_function"] == "gelu_new" and g["tie_word_embeddings"] is True
t = read(sys.argv[1] + "/model.safetensors")
assert t["transformer.wte.weight"] == [256, 64] and t["transformer.wpe.weight"] == [32, 64]
assert t["transformer.h.1.attn.c_attn.weight"] == [64, 192], t["transformer.h.1.attn.c_attn.weight"]
assert "lm_head.weight" not in t  # tied
l = json.load(open(sys.argv[2] + "/config.json"))
assert l["model_type"] == "llama" and l["num_key_value_heads"] == 2 and l["num_attention_heads"] == 4, l
assert l["tie_word_embeddings"] is False and l["hidden_act"] == "silu" and l["intermediate_size"] == 256
t = read(sys.argv[2] + "/model.safetensors")
assert t["model.layers.0.self_attn.k_proj.weight"] == [32, 64] and t["lm_head.weight"] == [256, 64]
print("ok: GPT-2 and Llama directories")
PY
# A checkpoint the trainer did not write (no recipe) is named, not guessed.
if "$ckpt" export --format hf "$tmp/nope" "$tmp/x" 2> "$tmp/err"; then echo "expected failure"; exit 1; fi
cat "$tmp/err"
