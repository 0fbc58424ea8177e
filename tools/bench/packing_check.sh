#!/usr/bin/env bash
# tools/bench/packing_check.sh — train.pack_projections on the GPU in one
# device call (about 5 minutes): the packed projections' GPU tests, then the
# 124M and hybrid steps with packing off and auto side by side, and llm.c.
#
#   (here)        tools/gpu.sh bundle; optionally put the llm.c anchor (llm.c with its
#                 run_llmc.sh, not part of this repository) in a git-ignored .llmc/
#   (device tool) run(command="bash tools/bench/packing_check.sh", carry=[".bundle", ".llmc"])
#
# 1. the GPU tests of the packed path: cuDNN attention with a row stride
#    (packed q/k/v/dq/dk/dv) and ops::FlashAttention* on packed views, RoPE
#    with a row stride, the GPT model packed against the CPU's f32 model,
#    the Mamba mixer with B, C, dt packed against the CPU's;
# 2. GPT-2 124M (B=8, T=1024, bf16) and the hybrid stack (`M*-` × 6),
#    40 steps each with train.pack_projections=off and =auto: the median
#    ms/step of steps 11–40, the peak memory, the two runs' losses (packing
#    changes the GEMMs' summation order only: they agree to bf16 noise);
# 3. llm.c (when LLMC, default .llmc, holds the anchor's run_llmc.sh), for the ratio.
# Each part prints PASS/FAIL or its figures; the exit status is 1 when a test
# failed. Logs in $OUT/packing_check when $OUT is set (the device tool), else
# a temp dir.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
source "$ROOT/tools/bench/layouts.sh"  # bench_start, run_gpu_test
bench_start packing_check "$ROOT" || exit 2  # LOG, WORK, B
status=0

echo "=== 1. GPU tests"
for t in core_kernels_cudnn_attention_gpu_test core_kernels_rope_gpu_test layers_gpt_gpu_test \
  layers_mamba_mamba_mixer_gpu_test; do
  run_gpu_test "$t" 200 || status=1
done

echo "=== 2. 124M and hybrid steps, train.pack_projections off and auto (bf16, B=8, T=1024, 40 steps)"
SET=model.vocab_size=50257,model.seq_len=1024,train.micro_batch=8,train.global_batch=8,train.precision=bf16,data.source=corpus,train.steps=40,train.log_every=1,train.eval_every=0,train.device=cuda,checkpoint.every=0,checkpoint.disable=true,checkpoint.no_resume=true
HYBRID=model.layer_pattern=M*-M*-M*-M*-M*-M*-,model.n_layer=18
step() {  # label settings
  local run
  run="$(mktemp -d)"
  if timeout 150 "$GTP_TRAIN" --config recipes/gpt_124m/gpt_124m.pbtxt --noprogress \
    --run_dir "$run" --set "$2" > "$LOG/$1.log" 2>&1; then
    cp "$run/metrics.jsonl" "$LOG/$1.jsonl"
  else
    echo "FAIL $1"
    tail -20 "$LOG/$1.log"
    status=1
  fi
  rm -rf "$run"
}
for model in g124 hybrid; do
  extra=""
  [[ $model == hybrid ]] && extra=",$HYBRID"
  step "${model}_off" "$SET$extra,train.pack_projections=off"
  step "${model}_auto" "$SET$extra,train.pack_projections=auto"
done
python3 - "$LOG" <<'PY'
import json, os, statistics, sys
log = sys.argv[1]
def rows(name):
    f = os.path.join(log, name + ".jsonl")
    return [r for r in map(json.loads, open(f)) if "loss" in r and "step" in r] if os.path.exists(f) else []
for model in ("g124", "hybrid"):
    runs = {p: rows(f"{model}_{p}") for p in ("off", "auto")}
    med = {}
    for p, rs in runs.items():
        ms = [r["ms"] for r in rs if r["step"] > 10 and "ms" in r]
        if not ms:
            print(f"{model} {p}: no step times")
            continue
        med[p] = statistics.median(ms)
        peak = max(r.get("peak_mem_bytes", 0) for r in rs) / 2**30
        print(f"{model} pack_projections={p}: median {med[p]:.2f} ms/step, peak {peak:.2f} GiB, "
              f"final loss {rs[-1]['loss']:.4f}")
    if len(med) == 2:
        d = [abs(a["loss"] - b["loss"]) for a, b in zip(runs["off"], runs["auto"])]
        print(f"{model}: auto / off = {med['auto'] / med['off']:.3f}; losses mean |d| "
              f"{sum(d) / len(d):.2e}, max |d| {max(d):.2e}")
PY

echo "=== 3. llm.c (same call)"
LLMC="${LLMC:-.llmc}"
if [[ -f "$LLMC/run_llmc.sh" ]]; then
  LLMC="$LLMC" timeout 200 bash "$LLMC/run_llmc.sh" 8 60 2>&1 | tail -1
else
  echo "no $LLMC/run_llmc.sh (the llm.c anchor is not part of this repository: put it there and carry it)"
fi
exit $status
