#!/usr/bin/env bash
# `ckpt import --format hf` (issue 18): HF directory → gtp checkpoint →
# `ckpt export --format hf` gives back the same directory.
#  1. gpt_tiny runs (GPT-2 under TP2·GTP2; Llama-style with a padded
#     vocabulary) exported, imported, exported again: model.safetensors
#     byte-identical, config.json equal in content;
#  2. hand-made HF directories (tools/ckpt/hf_dir.py, written from
#     transformers' conventions: GPT-2 with buffers and a non-default n_inner;
#     Llama sharded with an index, GQA and rope_theta 5e5; a bf16 Llama):
#     every tensor comes back byte for byte (bf16: its exact f32 widening),
#     every config value export writes is the source's;
#  3. what gtp cannot hold is refused in one line naming the field or tensor.
set -euo pipefail
train="$1" ckpt="$2" hf_dir="$3"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
json_equal() { python3 -c 'import json, sys; a, b = (json.load(open(p)) for p in sys.argv[1:]); sys.exit(a != b)' "$1" "$2"; }

echo "== 1. trainer checkpoints"
base="model.n_layer=2,model.seq_len=32,train.steps=2,train.micro_batch=2,train.global_batch=4,train.eval_every=0"
llama="model.rope=true,model.norm=rmsnorm,model.activation=swiglu,model.no_bias=true,model.untied_embeddings=true,model.n_kv_head=2"
"$train" --run_dir "$tmp/gpt2" --set "$base" > /dev/null
"$train" --run_dir "$tmp/llama" --set "$base,$llama,data.source=mock,model.vocab_size=200,model.rope_theta=20000" > /dev/null
for m in gpt2 llama; do
  "$ckpt" export --format hf "$tmp/$m/checkpoints" "$tmp/$m.hf1" > /dev/null
  "$ckpt" import --format hf "$tmp/$m.hf1" "$tmp/$m.imported"
  "$ckpt" export --format hf "$tmp/$m.imported" "$tmp/$m.hf2"
  cmp "$tmp/$m.hf1/model.safetensors" "$tmp/$m.hf2/model.safetensors"
  json_equal "$tmp/$m.hf1/config.json" "$tmp/$m.hf2/config.json" || { echo "$m: config.json differs"; diff "$tmp/$m.hf1/config.json" "$tmp/$m.hf2/config.json"; exit 1; }
  # The imported checkpoint is one rank's, at iteration 0, and names its recipe.
  "$ckpt" inspect "$tmp/$m.imported" > "$tmp/$m.inspect"
  grep -q "iteration 0, format 1, saved by 1 ranks" "$tmp/$m.inspect"
  grep -q "^  recipe:$" "$tmp/$m.inspect" && grep -q "^    name: \"hf_import\"" "$tmp/$m.inspect"
  echo "ok $m: import → export is byte-identical"
done
grep -q "lm_head.weight .* \[256, 64\]" "$tmp/llama.inspect"  # vocabulary 200 padded to 256, as the trainer stores it

echo "== 2. hand-made directories"
for v in "gpt2:" "llama:--sharded" "llama_bf16:--bf16"; do
  name="${v%%:*}"; flags="${v#*:}"
  python3 "$hf_dir" make "${name%_bf16}" "$tmp/$name.src" $flags
  "$ckpt" import --format hf "$tmp/$name.src" "$tmp/$name.ckpt" > /dev/null
  "$ckpt" export --format hf "$tmp/$name.ckpt" "$tmp/$name.out" > /dev/null
  python3 "$hf_dir" compare "$tmp/$name.src" "$tmp/$name.out"
done
# GPT-2's config.json has dropout 0.1 (transformers' default): imported, and named.
"$ckpt" import --format hf "$tmp/gpt2.src" "$tmp/gpt2_note.ckpt" > "$tmp/note.out"
grep -q "^note: config.json sets resid_pdrop 0.1, embd_pdrop 0.1, attn_pdrop 0.1; gtp has no dropout" "$tmp/note.out" \
  || { echo "no dropout note:"; cat "$tmp/note.out"; exit 1; }

# Mistral: Llama's tensors and config; with no sliding window (or one that
# covers max_position_embeddings) it is the same model, exported as Llama.
for w in None 100000; do
  rm -rf "$tmp/mistral.src" "$tmp/mistral.ckpt" "$tmp/mistral.out"
  cp -r "$tmp/llama.src" "$tmp/mistral.src"
  python3 -c 'import json, sys; p = sys.argv[1] + "/config.json"; c = json.load(open(p)); c.update(architectures=["MistralForCausalLM"], model_type="mistral", sliding_window=eval(sys.argv[2])); json.dump(c, open(p, "w"))' "$tmp/mistral.src" "$w"
  "$ckpt" import --format hf "$tmp/mistral.src" "$tmp/mistral.ckpt" > /dev/null
  "$ckpt" export --format hf "$tmp/mistral.ckpt" "$tmp/mistral.out" > /dev/null
  cmp "$tmp/llama.out/model.safetensors" "$tmp/mistral.out/model.safetensors"
  echo "ok mistral (sliding_window $w): imports as the Llama it is"
done

echo "== 3. refusals"
refused() {  # name, pattern, python edit of (cfg, tensors dict path), or a command
  local name="$1" pattern="$2" edit="$3" src="$tmp/bad_$1"
  rm -rf "$src"; cp -r "$tmp/gpt2.src" "$src"
  [ "${4:-}" = llama ] && { rm -rf "$src"; cp -r "$tmp/llama_bf16.src" "$src"; }
  python3 - "$src" "$hf_dir" <<PY
import json, os, sys
sys.path.insert(0, os.path.dirname(sys.argv[2]))
import hf_dir
d = sys.argv[1]
cfg = json.load(open(d + "/config.json"))
t = {k: (s, list(__import__("struct").unpack("<%df" % (len(b) // 4), b)) if dt == "F32" else [0.0] * (len(b) // 2))
     for k, (dt, s, b) in hf_dir.read_safetensors(d + "/model.safetensors").items()}
$edit
json.dump(cfg, open(d + "/config.json", "w"))
hf_dir.write_safetensors(d + "/model.safetensors", t)
PY
  if "$ckpt" import --format hf "$src" "$tmp/bad_$1.ckpt" > /dev/null 2> "$tmp/bad.err"; then
    echo "$name: expected failure"; exit 1
  fi
  [ "$(wc -l < "$tmp/bad.err")" -eq 1 ] || { echo "$name: not one line:"; cat "$tmp/bad.err"; exit 1; }
  grep -q -- "$pattern" "$tmp/bad.err" || { echo "$name: message lacks '$pattern':"; cat "$tmp/bad.err"; exit 1; }
  [ ! -e "$tmp/bad_$1.ckpt/latest" ] || { echo "$name: wrote a checkpoint"; exit 1; }
  echo "ok $name: $(cat "$tmp/bad.err")"
}
refused arch 'architecture "Qwen2ForCausalLM" is not supported' 'cfg["architectures"] = ["Qwen2ForCausalLM"]'
refused sliding_window 'sliding_window 8 is shorter than max_position_embeddings' 'cfg["architectures"] = ["MistralForCausalLM"]; cfg["sliding_window"] = 8' llama
refused activation 'activation_function "relu" is not supported' 'cfg["activation_function"] = "relu"'
refused erf_gelu 'activation_function "gelu" is not supported (gtp.s GELU is the tanh form' 'cfg["activation_function"] = "gelu"'
refused missing 'lacks tensor transformer.h.1.mlp.c_fc.bias' 'del t["transformer.h.1.mlp.c_fc.bias"]'
refused shape 'tensor transformer.h.0.mlp.c_fc.weight in .* is \[32, 64\]; config.json implies \[32, 80\]' 'cfg["n_inner"] = 80'
refused extra 'has tensors a GPT2LMHeadModel with this config.json lacks: transformer.h.1.' 'cfg["n_layer"] = 1'
refused untied 'lm_head.weight differs from wte.weight' 't["lm_head.weight"] = (t["transformer.wte.weight"][0], [0.5] * len(t["transformer.wte.weight"][1]))'
refused eps '"layer_norm_epsilon" is 0; a norm.s epsilon is in (0, 1)' 'cfg["layer_norm_epsilon"] = 0'
refused tied_llama '"tie_word_embeddings": true is not supported' 'cfg["tie_word_embeddings"] = True' llama
refused rope_scaling 'rope_scaling is not supported' 'cfg["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0}' llama
refused llama_bias '"attention_bias": true is not supported' 'cfg["attention_bias"] = True' llama
refused silu_only 'hidden_act "gelu" is not supported' 'cfg["hidden_act"] = "gelu"' llama
# Never over an existing checkpoint.
if "$ckpt" import --format hf "$tmp/gpt2.src" "$tmp/gpt2.ckpt" 2> "$tmp/bad.err"; then echo "overwrote"; exit 1; fi
grep -q "already holds a checkpoint" "$tmp/bad.err"
if "$ckpt" import --format hf "$tmp/nowhere" "$tmp/x" 2> "$tmp/bad.err"; then echo "no dir: expected failure"; exit 1; fi
grep -q "cannot read $tmp/nowhere/config.json" "$tmp/bad.err"
echo "ok: import"
