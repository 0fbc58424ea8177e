#!/usr/bin/env bash
# A Llama-style model trained two steps under TP2·GTP2, exported with
# --names hf-llama; an independent stdlib-only parse checks every HF name and
# shape and that gate/up are the two halves of gtp's fused fc.
set -euo pipefail
train="$1" ckpt="$2"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
"$train" --run_dir "$tmp/run" --set "model.n_layer=2,model.seq_len=32,model.rope=true,model.norm=rmsnorm,model.activation=swiglu,model.no_bias=true,model.untied_embeddings=true,model.n_kv_head=2,train.steps=2,train.micro_batch=2,train.global_batch=4,train.eval_every=0" > /dev/null
"$ckpt" export --format safetensors --names hf-llama --vocab 256 "$tmp/run/checkpoints" "$tmp/llama.safetensors"
"$ckpt" export --format safetensors --names gtp "$tmp/run/checkpoints" "$tmp/gtp.safetensors"
python3 - "$tmp/llama.safetensors" "$tmp/gtp.safetensors" <<'PY'
import json, struct, sys
def read(p):
    d = open(p, "rb").read()
    n = struct.unpack("<Q", d[:8])[0]
    h = json.loads(d[8:8 + n])
    return {k: (v["shape"], d[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in h.items() if k != "__metadata__"}
hf, g = read(sys.argv[1]), read(sys.argv[2])
C, H = 64, 256
assert hf["model.embed_tokens.weight"][0] == [256, C], hf["model.embed_tokens.weight"][0]
assert hf["lm_head.weight"][0] == [256, C]
assert hf["model.norm.weight"][0] == [C]
for l in range(2):
    p = "model.layers.%d." % l
    assert hf[p + "self_attn.q_proj.weight"][0] == [C, C]
    assert hf[p + "self_attn.k_proj.weight"][0] == [C // 2, C]   # 2 of 4 heads: GQA
    assert hf[p + "mlp.down_proj.weight"][0] == [C, H]
    fc = g["h.%d.mlp.fc.weight" % l][1]
    assert hf[p + "mlp.gate_proj.weight"] == ([H, C], fc[:H * C * 4])
    assert hf[p + "mlp.up_proj.weight"] == ([H, C], fc[H * C * 4:])
    assert hf[p + "self_attn.o_proj.weight"][1] == g["h.%d.attn.o.weight" % l][1]
print("ok:", len(hf), "tensors")
PY

# Export settings that would lose or mix weights are refused (issue 29, item 6).
expect_fail() {  # expected message, then the command
  local want="$1"; shift
  if "$@" > "$tmp/out.txt" 2> "$tmp/err.txt"; then echo "expected failure: $*"; exit 1; fi
  grep -qF -- "$want" "$tmp/err.txt" || { echo "want '$want' from: $*"; cat "$tmp/err.txt"; exit 1; }
}
expect_fail "--vocab 100 is below the model's vocabulary (model.vocab_size 256)" \
  "$ckpt" export --format safetensors --names hf-llama --vocab 100 "$tmp/run/checkpoints" "$tmp/cut.safetensors"
[[ ! -e "$tmp/cut.safetensors" ]] || { echo "a refused export wrote its file"; exit 1; }
expect_fail "--names gtp exports the tables as trained (drop --vocab)" \
  "$ckpt" export --format safetensors --names gtp --vocab 256 "$tmp/run/checkpoints" "$tmp/g2.safetensors"
expect_fail "--vocab must be a positive number of rows, got 'abc'" \
  "$ckpt" export --format safetensors --names hf-llama --vocab abc "$tmp/run/checkpoints" "$tmp/g3.safetensors"
mkdir -p "$tmp/hf_used" && echo stale > "$tmp/hf_used/tokenizer.json"
expect_fail "is not empty (it holds tokenizer.json" \
  "$ckpt" export --format hf "$tmp/run/checkpoints" "$tmp/hf_used"
echo "ok: refusals"
