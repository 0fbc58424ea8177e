#!/usr/bin/env bash
# tools/plan/validate_1gpu.sh — issue 32's one-GPU acceptance in one device
# call: calibrate the kernels, train each tools/bench shape for a few dozen
# steps, predict the same runs with the fresh calibration, compare.
#
#   (GPU machine, repo root, bundle carried)  bash tools/plan/validate_1gpu.sh
#   (CPU, tiny shapes; the sh_test)           bash tools/plan/validate_1gpu.sh --device cpu --plan P --train T
#
# 1. `plan calibrate --device D --out OUT/h200.calibration` (cpu: cpu.calibration, --quick);
# 2. for each shape, recipes_gpt_124m_train --config recipes/gpt_124m/gpt_124m.pbtxt
#    --set SET (bf16 on cuda, f32 on cpu; STEPS steps, B = 8, T = 1024, CUDA
#    graphs as the trainer defaults); measured = the median ms over steps
#    after SKIP, and the largest peak_mem_bytes (the caching allocator's peak)
#    from its metrics.jsonl;
# 3. `plan predict --json --recipe (same) --set SET (the same string)
#    --cluster C --calibration (step 1)`: step_s and memory.allocator (the
#    planner's bytes without the CUDA context and NCCL buffers, which the
#    allocator does not hold);
# 4. one table: shape | measured ms | predicted ms | err % | measured peak GiB
#    | predicted GiB | err %; exit 1 when any |err| > TOL % (cuda; on cpu the
#    table must only be complete, finite and positive: the planner models a
#    GPU, not a 2-core CPU).
#
# Shapes (tools/bench/bench.sh and acceptance.sh, B = 8, T = 1024, vocab 50257):
#   gpt124m  GPT-2 124M: 12 layers, C = 768, 12 heads
#   gpt350m  24 layers, C = 1024, 16 heads
#   moe      GPT-2 small with every MLP 8 experts of hidden 1536, top-2
#            (aux 0.01, z 0.001)
#   hybrid   layer pattern "M*-M*-M*-M*-M*-M*-" (18 layers), C = 768, 12 heads
# cpu: the same four kinds at vocab 256, T = 64, 2 layers (hybrid "M*-"),
# C = 64, 4 heads, B = 4.
#
# Options:
#   --bin DIR          bundled binaries (tools_plan_plan, recipes_gpt_124m_train);
#                      default /tmp/gtp_bundle/bin if present, else the
#                      bundle .bundle/bundle.tar.xz is unpacked (as tools/gpu.sh run)
#   --plan P --train T the two binaries directly (override --bin)
#   --device cuda|cpu  (cuda)          --steps N (40; cpu 6)   --skip K (10; cpu 2)
#   --shapes "gpt124m gpt350m moe hybrid"                      --tol PCT (10)
#   --enforce          apply --tol on cpu too (the sh_test checks the NOT MET path)
#   --cluster FILE     (plan/clusters/h200.cluster)
#   --calibration FILE use this table instead of calibrating
#   --out DIR          (default $OUT/validate_1gpu, else a temp dir): the
#                      calibration, each run's metrics and log, table.txt
#   GTP_SET="k=v,..."  extra overrides for both trainer and planner
# About 3 minutes of GPU time on an H200 (calibration ~1 min, four runs of
# 40 steps with start-up and the final checkpoint, deleted after each run).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"

BIN="" PLAN="" TRAIN="" DEVICE=cuda STEPS="" SKIP="" SHAPES="gpt124m gpt350m moe hybrid" TOL=10
CLUSTER=plan/clusters/h200.cluster CAL="" OUTDIR="" ENFORCE=""
while (($#)); do
  case "$1" in
    --bin) BIN="$2"; shift 2 ;;
    --plan) PLAN="$2"; shift 2 ;;
    --train) TRAIN="$2"; shift 2 ;;
    --device) DEVICE="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --skip) SKIP="$2"; shift 2 ;;
    --shapes) SHAPES="$2"; shift 2 ;;
    --tol) TOL="$2"; shift 2 ;;
    --cluster) CLUSTER="$2"; shift 2 ;;
    --calibration) CAL="$2"; shift 2 ;;
    --out) OUTDIR="$2"; shift 2 ;;
    --enforce) ENFORCE=1; shift ;;
    -h|--help) sed -n '2,50p' "$0"; exit 0 ;;
    *) echo "validate_1gpu: unknown argument '$1' (--help)" >&2; exit 2 ;;
  esac
done
case "$DEVICE" in
  cuda) STEPS="${STEPS:-40}" SKIP="${SKIP:-10}" ENFORCE=1 ;;
  cpu) STEPS="${STEPS:-6}" SKIP="${SKIP:-2}" ;;
  *) echo "validate_1gpu: --device must be cuda or cpu" >&2; exit 2 ;;
esac
((SKIP < STEPS)) || { echo "validate_1gpu: --skip must be below --steps" >&2; exit 2; }
if [[ -z "$OUTDIR" ]]; then
  if [[ -n "${OUT:-}" ]]; then OUTDIR="$OUT/validate_1gpu"; else OUTDIR="$(mktemp -d "${TMPDIR:-/tmp}/validate_1gpu.XXXXXX")"; fi
fi
mkdir -p "$OUTDIR"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/validate_1gpu_work.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

# Binaries: explicit, a bin dir, or the bundle (named as tools/gpu.sh names them).
if [[ -z "$PLAN" || -z "$TRAIN" ]]; then
  if [[ -z "$BIN" && -x /tmp/gtp_bundle/bin/tools_plan_plan ]]; then BIN=/tmp/gtp_bundle/bin; fi
  if [[ -z "$BIN" ]]; then
    tarball="${GTP_BUNDLE_DIR:-$ROOT/.bundle}/bundle.tar.xz"
    [[ -f "$tarball" ]] || { echo "validate_1gpu: no --bin, no /tmp/gtp_bundle/bin and no $tarball (tools/gpu.sh bundle; carry .bundle)" >&2; exit 1; }
    mkdir -p "$WORK/bundle" && tar -C "$WORK/bundle" -xJf "$tarball"
    BIN="$WORK/bundle/bin"
  fi
  PLAN="${PLAN:-$BIN/tools_plan_plan}" TRAIN="${TRAIN:-$BIN/recipes_gpt_124m_train}"
  if [[ -d "$BIN/../lib" ]]; then export LD_LIBRARY_PATH="$(cd "$BIN/../lib" && pwd):/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"; fi
fi
for b in "$PLAN" "$TRAIN"; do [[ -x "$b" ]] || { echo "validate_1gpu: no binary $b" >&2; exit 1; }; done
export NCCL_NVLS_ENABLE=0 OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-8}"
if [[ "$DEVICE" == cuda ]]; then nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true; fi
RECIPE=recipes/gpt_124m/gpt_124m.pbtxt

# 1. Calibration.
if [[ -z "$CAL" ]]; then
  if [[ "$DEVICE" == cuda ]]; then
    CAL="$OUTDIR/h200.calibration"
    t0=$SECONDS; "$PLAN" calibrate --device cuda --out "$CAL"
  else
    CAL="$OUTDIR/cpu.calibration"
    t0=$SECONDS; "$PLAN" calibrate --device cpu --quick --out "$CAL"
  fi
  echo "validate_1gpu: calibration took $((SECONDS - t0)) s"
fi

# 2.–3. Each shape: train, then predict with the same settings.
if [[ "$DEVICE" == cuda ]]; then
  BASE="model.vocab_size=50257,model.seq_len=1024,train.micro_batch=8,train.global_batch=8,train.precision=bf16"
  DENSE="model.n_layer=12,model.n_embd=768,model.n_head=12"
  declare -A SHAPE_SET=(
    [gpt124m]="$DENSE"
    [gpt350m]="model.n_layer=24,model.n_embd=1024,model.n_head=16"
    [moe]="$DENSE,model.moe.num_experts=8,model.moe.top_k=2,model.moe.ffn_hidden=1536,model.moe.aux_loss_coeff=0.01,model.moe.z_loss_coeff=0.001"
    [hybrid]="model.layer_pattern=M*-M*-M*-M*-M*-M*-,model.n_layer=18,model.n_embd=768,model.n_head=12"
  )
else
  BASE="model.vocab_size=256,model.seq_len=64,train.micro_batch=4,train.global_batch=4,train.precision=f32"
  DENSE="model.n_layer=2,model.n_embd=64,model.n_head=4"
  declare -A SHAPE_SET=(
    [gpt124m]="$DENSE"
    [gpt350m]="model.n_layer=4,model.n_embd=96,model.n_head=4"
    [moe]="$DENSE,model.moe.num_experts=4,model.moe.top_k=2,model.moe.ffn_hidden=64,model.moe.aux_loss_coeff=0.01,model.moe.z_loss_coeff=0.001"
    [hybrid]="model.layer_pattern=M*-,model.n_layer=3,model.n_embd=64,model.n_head=4,model.mamba.head_dim=8,model.mamba.chunk=16"
  )
fi
COMMON="data.source=corpus,data.seed=1234,train.seed=1234,train.steps=$STEPS,train.log_every=10,train.eval_every=0"
COMMON+=",train.device=$DEVICE,checkpoint.every=0,checkpoint.no_resume=true"
rows="$OUTDIR/rows.tsv"
: > "$rows"
for shape in $SHAPES; do
  [[ -n "${SHAPE_SET[$shape]:-}" ]] || { echo "validate_1gpu: unknown shape '$shape' (gpt124m gpt350m moe hybrid)" >&2; exit 2; }
  SET="$BASE,${SHAPE_SET[$shape]},$COMMON${GTP_SET:+,$GTP_SET}"
  echo "=== $shape: --set $SET"
  run="$WORK/run_$shape"
  t0=$SECONDS
  if ! "$TRAIN" --config "$RECIPE" --run_dir "$run" --noprogress --set "$SET" > "$OUTDIR/$shape.log" 2>&1; then
    tail -20 "$OUTDIR/$shape.log"; echo "validate_1gpu: $shape: the trainer failed (log $OUTDIR/$shape.log)" >&2; exit 1
  fi
  echo "    trained in $((SECONDS - t0)) s"
  cp "$run/metrics.jsonl" "$OUTDIR/$shape.metrics.jsonl"
  rm -rf "$run"  # the final checkpoint (350M: ~4 GB)
  "$PLAN" predict --json --recipe "$RECIPE" --cluster "$CLUSTER" --calibration "$CAL" --set "$SET" \
    > "$OUTDIR/$shape.prediction.json" || { echo "validate_1gpu: $shape: plan predict failed" >&2; exit 1; }
  printf '%s\t%s\t%s\n' "$shape" "$OUTDIR/$shape.metrics.jsonl" "$OUTDIR/$shape.prediction.json" >> "$rows"
done

# 4. The table.
python3 - "$rows" "$SKIP" "$TOL" "$DEVICE" "$CAL" "$ENFORCE" <<'PY' | tee "$OUTDIR/table.txt"
import json, math, sys
rows, skip, tol, device, cal = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5]
enforce = sys.argv[6] == "1"
GiB = 2.0 ** 30
def median(xs):
    s = sorted(xs)
    n = len(s)
    return (s[n // 2] + s[(n - 1) // 2]) / 2 if n else float("nan")
out, bad, broken = [], [], []
for line in open(rows):
    shape, metrics, pred = line.rstrip("\n").split("\t")
    steps = {}
    for l in open(metrics):
        l = l.strip()
        if l:
            r = json.loads(l)
            if "loss" in r and "ms" in r:
                steps[r["step"]] = r
    recs = [steps[s] for s in sorted(steps)]
    ms = median([r["ms"] for r in recs[skip:]])
    peak = max((r.get("peak_mem_bytes", 0) for r in recs), default=0)
    p = json.loads(open(pred).read())
    pms, pmem = 1e3 * p["step_s"], p["memory"]["allocator"]
    e_t = 100 * (pms / ms - 1) if ms > 0 else float("nan")
    e_m = 100 * (pmem / peak - 1) if peak > 0 else float("nan")
    vals = [ms, pms, peak, pmem]
    if not all(math.isfinite(v) and v > 0 for v in vals) or not (math.isfinite(e_t) and math.isfinite(e_m)):
        broken.append(shape)
    elif abs(e_t) > tol or abs(e_m) > tol:
        bad.append(shape)
    out.append((shape, ms, pms, e_t, peak / GiB, pmem / GiB, e_m, p["calibrated"], len(recs)))
print(f"plan vs measured, one GPU ({device}), calibration {cal}; median ms over steps > {skip}, allocator peak")
print("| shape | steps | measured ms/step | predicted ms/step | error % | measured peak GiB | predicted GiB | error % | calibrated |")
print("|---|---|---|---|---|---|---|---|---|")
for s, ms, pms, et, mg, pg, em, c, n in out:
    print(f"| {s} | {n} | {ms:.3f} | {pms:.3f} | {et:+.1f} | {mg:.3f} | {pg:.3f} | {em:+.1f} | {'yes' if c else 'NO'} |")
if broken:
    print(f"BROKEN (missing, non-finite or non-positive numbers): {' '.join(broken)}")
    sys.exit(1)
if enforce:
    if bad:
        print(f"NOT MET: |error| > {tol:g} % for {' '.join(bad)}")
        sys.exit(1)
    print(f"MET: every shape within {tol:g} % (step time and peak memory)")
else:
    print(f"cpu mode: table complete; the {tol:g} % target applies on the GPU only")
PY
