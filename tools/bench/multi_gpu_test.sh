#!/usr/bin/env bash
# The multi-GPU bench scripts without GPUs: layouts.sh's names, the layout
# selection of nccl_parity.sh / scaling.sh / two_gpu.sh at 1, 2, 4 and 8
# GPUs (--dry_run), parity.py's and dist_table.py's tables on made-up runs,
# and both scripts end to end on the CPU (DEVICE=cpu: UCX processes under
# gtprun, a tiny model; PyTorch replaced by a fake that writes a summary).
set -euo pipefail
train="$(realpath "$1")" gtprun="$(realpath "$2")"
dir="$(cd "$(dirname "$3")" && pwd)"  # tools/bench (the location of nccl_parity.sh)
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
export TMPDIR="$tmp"
fail() { echo "FAIL: $*"; exit 1; }
expect() { grep -qF -- "$2" "$1" || { cat "$1"; fail "$1 lacks: $2"; }; }
count() { grep -c -- "$2" "$1" || true; }

# 1. Layout names.
source "$dir/layouts.sh"
layout_parse tp2gtp4
[[ "$LAYOUT_WORLD $LAYOUT_LANES $(layout_label)" == "8 4 TP2·GTP4" ]] || fail "tp2gtp4: $LAYOUT_WORLD $LAYOUT_LANES"
[[ "$LAYOUT_SET" == "parallel.world_size=8,parallel.tp=2,parallel.tp_num_weight_shards=8" ]] || fail "tp2gtp4 set: $LAYOUT_SET"
layout_parse tp2gtp2dp2ep4egtp2_moe
[[ "$LAYOUT_WORLD $LAYOUT_MODEL" == "8 moe" ]] || fail "moe layout"
[[ "$LAYOUT_SET" == *",parallel.ep=4,parallel.expert_tp_num_weight_shards=2" ]] || fail "moe set: $LAYOUT_SET"
layout_parse pp2_llama && [[ "$LAYOUT_SET" == *",parallel.pp=2" && "$LAYOUT_MODEL" == llama ]] || fail "pp2_llama"
layout_parse tp2gtp2_sp_llama && [[ "$LAYOUT_SET" == *"sequence_parallel=true" && "$(layout_label)" == "TP2·GTP2 SP (llama)" ]] || fail "sp"
layout_parse dp1 && [[ "$LAYOUT_WORLD" == 1 ]] || fail "dp1"
for bad in gtp2gtp2 tp0 xp2 gtp2_fast ep2_llama dp2ep4_moe; do
  if layout_parse "$bad" 2>/dev/null; then fail "accepted '$bad'"; fi
done
echo "layouts: ok"

# 2. nccl_parity.sh's selection (dry run): cells of more ranks than GPUs are SKIPs.
for n in 1 2 8; do
  bash "$dir/nccl_parity.sh" "$n" --dry_run > "$tmp/dry$n.txt"
done
# N=1: per precision the reference and the one-rank cell; bf16 adds the noise run (micro-batch 1)
# and the reference in f32 over the bf16 steps (bf16's own rounding error).
[[ "$(count "$tmp/dry1.txt" '^SKIP')" == 66 && "$(count "$tmp/dry1.txt" '^RUN')" == 6 ]] || { cat "$tmp/dry1.txt"; fail "N=1 selection"; }
expect "$tmp/dry1.txt" "SKIP GTP2: needs 2 ranks, at most 1 here"
expect "$tmp/dry1.txt" "/bf16/noise_gpt2 "
grep -q "^RUN recipes_gpt_124m_train .*/bf16/f32_gpt2 .*train.steps=50,.*train.precision=f32," "$tmp/dry1.txt" || fail "bf16's f32 probe"
# One GPU, ranks sharing it (gtprun's shared-GPU mode): every cell runs.
bash "$dir/nccl_parity.sh" 1 --max_ranks 8 --dry_run > "$tmp/dry1m.txt"
[[ "$(count "$tmp/dry1m.txt" '^SKIP')" == 0 && "$(count "$tmp/dry1m.txt" '^RUN')" == 84 ]] || { cat "$tmp/dry1m.txt"; fail "N=1, max 8 ranks selection"; }
expect "$tmp/dry1m.txt" "CORRECTNESS run through the real NCCL"
expect "$tmp/dry1.txt" "RUN tools_gtprun_gtprun --nproc 1 -- recipes_gpt_124m_train"
[[ "$(grep -c 'reference' "$tmp/dry1.txt")" == 2 ]] || fail "N=1: one reference per precision"
# N=2: 14 two-rank cells + the one-rank one + 4 references (gpt2, llama, moe, hybrid) per
# precision, and bf16's 4 noise runs and 4 f32 probes; 19 cells of 4 and 8 ranks skipped per precision.
[[ "$(count "$tmp/dry2.txt" '^RUN')" == 46 && "$(count "$tmp/dry2.txt" '^SKIP')" == 38 ]] || { cat "$tmp/dry2.txt"; fail "N=2 selection"; }
for l in "GTP2" "TP2" "DP2" "PP2" "PP2 (llama)" "PP2·VPP2" "CP2" "DP2·EP2 (moe)" "GTP2 (hybrid)"; do expect "$tmp/dry2.txt" "# $l (2 ranks, f32"; done
expect "$tmp/dry2.txt" "# PP2 (2 ranks, f32, gpt2; tolerance 2e-4)"
expect "$tmp/dry2.txt" "# PP2 (llama) (2 ranks, f32, llama; tolerance 1e-5)"
expect "$tmp/dry2.txt" "# GTP2 (2 ranks, bf16, gpt2; tolerance 2e-2)"
grep -q "^RUN tools_gtprun_gtprun --nproc 2 .*/f32/gtp2 .*train.steps=8,.*parallel.world_size=2,parallel.tp=1,parallel.tp_num_weight_shards=2$" "$tmp/dry2.txt" || fail "GTP2 command"
grep -q "^RUN tools_gtprun_gtprun --nproc 2 .*/bf16/dp2ep2_moe .*train.steps=50,.*model.moe.num_experts=8.*parallel.ep=2$" "$tmp/dry2.txt" || fail "EP2 command"
grep -q "^RUN recipes_gpt_124m_train .*/f32/ref_llama .*model.rope=true.*parallel.world_size=1" "$tmp/dry2.txt" || fail "llama reference"
[[ "$(count "$tmp/dry8.txt" '^SKIP')" == 0 && "$(count "$tmp/dry8.txt" '^RUN')" == 84 ]] || { cat "$tmp/dry8.txt"; fail "N=8 selection"; }
expect "$tmp/dry8.txt" "# TP2·GTP2·DP2·EP4·EGTP2 (moe) (8 ranks, f32"
bash "$dir/nccl_parity.sh" 8 --dry_run --precision bf16 --min_ranks 8 > "$tmp/dry8b.txt"
[[ "$(count "$tmp/dry8b.txt" '^RUN')" == 16 ]] || { cat "$tmp/dry8b.txt"; fail "--min_ranks 8: 7 cells + 3 references + 3 noise runs + 3 f32 probes"; }
if bash "$dir/nccl_parity.sh" 2 --dry_run --cells "gtp2 nonsense" > "$tmp/bad.txt" 2>&1; then fail "bad cell accepted"; fi
expect "$tmp/bad.txt" "cannot read 'nonsense'"
if bash "$dir/nccl_parity.sh" --bogus > "$tmp/bad.txt" 2>&1; then fail "bad flag accepted"; fi
expect "$tmp/bad.txt" "Usage: nccl_parity.sh"
# fp8 with fp8-only GTP_SET settings: every fp8 run carries them, the f32 probe none (f32 refuses them).
GTP_SET="parallel.gtp_gather_dtype=fp8_tiles,train.fp8_bf16_first_layers=1,train.fp8_bf16_last_layers=1" \
  bash "$dir/nccl_parity.sh" 2 --dry_run --precision fp8 --cells gtp2 > "$tmp/dry2f.txt"
[[ "$(grep -c '^RUN .*train.precision=fp8,.*gtp_gather_dtype=fp8_tiles,train.fp8_bf16_first_layers=1,train.fp8_bf16_last_layers=1$' "$tmp/dry2f.txt")" == 3 ]] || { cat "$tmp/dry2f.txt"; fail "fp8 runs without GTP_SET"; }
grep -q '^RUN .*/fp8/f32_gpt2 .*train.precision=f32,.*tp_num_weight_shards=1$' "$tmp/dry2f.txt" || { cat "$tmp/dry2f.txt"; fail "f32 probe kept fp8-only settings"; }
echo "nccl_parity selection: ok"

# 3. parity.py on made-up metrics: within tolerance, outside it, a step missing, SKIP and error rows.
python3 - "$tmp" <<'PY'
import json, sys
t = sys.argv[1]
def w(name, losses):
    with open(f"{t}/{name}.jsonl", "w") as f:
        for i, l in enumerate(losses, 1):
            f.write(json.dumps({"step": i, "loss": l, "ms": 1.0}) + "\n")
        f.write(json.dumps({"step": len(losses), "val_loss": 1.0}) + "\n")
ref = [5.0, 4.0, 3.0, 2.0]
w("ref", ref)
w("close", [x * (1 + 2e-6) for x in ref])
w("far", [5.0, 4.0, 3.003, 2.0])
w("short", ref[:3])
w("bf16", [x * (1 + 8e-3) for x in ref])
PY
printf '%s\n' \
  "GTP2	2	f32	ran	$tmp/ref.jsonl	$tmp/close.jsonl	1e-5	-	" \
  "TP2	2	f32	ran	$tmp/ref.jsonl	$tmp/far.jsonl	1e-5	-	" \
  "DP2	2	f32	ran	$tmp/ref.jsonl	$tmp/short.jsonl	1e-5	-	" \
  "CP2	2	bf16	ran	$tmp/ref.jsonl	$tmp/bf16.jsonl	2e-2	5e-3	" \
  "GTP4	4	f32	skip	-	-	1e-5	-	needs 4 GPUs, 2 found" \
  "PP2	2	f32	error	-	-	2e-4	-	rc 1: error: boom" > "$tmp/cells.tsv"
rc=0; python3 "$dir/parity.py" "$tmp/cells.tsv" > "$tmp/parity.txt" || rc=$?
cat "$tmp/parity.txt"
[[ "$rc" == 1 ]] || fail "parity.py exit $rc with failures"
expect "$tmp/parity.txt" "| GTP2 | 2 | f32 | 4 | 2.00e-06 | 2.00e-06 | 1e-5 | PASS |  |"
expect "$tmp/parity.txt" "| TP2 | 2 | f32 | 4 | 1.00e-03 | 2.50e-04 | 1e-5 | FAIL | step 3: 3.003000 vs 3.000000 |"
expect "$tmp/parity.txt" "| DP2 | 2 | f32 | 3 | — | — | 1e-5 | FAIL | steps differ: ref 4, run 3 |"
expect "$tmp/parity.txt" "| CP2 | 2 | bf16 | 4 | 8.00e-03 | 8.00e-03 | 2e-2 (mean 5e-3) | FAIL | mean rel 8.00e-03 > 0.005 |"
expect "$tmp/parity.txt" "| GTP4 | 4 | f32 | — | — | — | 1e-5 | SKIP | needs 4 GPUs, 2 found |"
expect "$tmp/parity.txt" "| PP2 | 2 | f32 | — | — | — | 2e-4 | FAIL | rc 1: error: boom |"
expect "$tmp/parity.txt" "parity: 1 PASS, 4 FAIL, 1 SKIP"
head -1 "$tmp/cells.tsv" > "$tmp/ok.tsv"
python3 "$dir/parity.py" "$tmp/ok.tsv" > /dev/null || fail "parity.py exit != 0 with all PASS"
[[ "$(python3 "$dir/parity.py" --noise "$tmp/ref.jsonl" "$tmp/bf16.jsonl")" == "8.000e-03 8.000e-03" ]] || fail "parity.py --noise"
printf 'rank death\t4\tbf16\tpass\t-\t-\t-\t-\t5 trials, 0 failed\n' > "$tmp/pass.tsv"
python3 "$dir/parity.py" "$tmp/pass.tsv" > "$tmp/pass.txt" || fail "parity.py: a pass row failed"
expect "$tmp/pass.txt" "| rank death | 4 | bf16 | — | — | — | - | PASS | 5 trials, 0 failed |"
echo "parity.py: ok"

# 3b. nccl_table.sh: the parts and their commands (dry run), a bad part refused.
bash "$dir/nccl_table.sh" --dry_run > "$tmp/table_dry.txt"
[[ "$(count "$tmp/table_dry.txt" '^PART')" == 10 ]] || { cat "$tmp/table_dry.txt"; fail "nccl_table: 10 parts"; }
expect "$tmp/table_dry.txt" "PART graphs: CELL_TIMEOUT=200 bash tools/bench/nccl_parity.sh 1 --max_ranks 8 --graphs --precision f32"
expect "$tmp/table_dry.txt" "rank_death_test.sh \$B/recipes_gpt_124m_train"
if bash "$dir/nccl_table.sh" --parts "f32 nope" > "$tmp/bad.txt" 2>&1; then fail "nccl_table: unknown part accepted"; fi
expect "$tmp/bad.txt" "unknown part 'nope'"
echo "nccl_table: ok"

# 4. dist_table.py on a made-up two-GPU comparison (two_gpu.sh's checks).
python3 - "$tmp" <<'PY'
import json, sys
t = sys.argv[1]
for name, ms, comm, params in [("gtp2", 100.0, 3.0, "177.50"), ("dp2", 98.0, 0.5, "355.00")]:
    with open(f"{t}/{name}.jsonl", "w") as f:
        for s in range(1, 31):
            f.write(json.dumps({"step": s, "loss": 10.0, "ms": ms if s > 10 else 5 * ms, "tokens_per_s": 1.0,
                                "comm_exposed_ms": comm, "mem_bytes": 6 << 30, "peak_mem_bytes": 40 << 30}) + "\n")
    with open(f"{t}/{name}.log", "w") as f:
        f.write(f"[rank 0] model: 24 layers, C=1024, heads=16, vocab=50257, T=1024, layernorm/gelu, "
                f"355.00M weight params ({params}M on this rank)\n")
for name, tok, state in [("fsdp2", 50000.0, 3 << 30), ("ddp", 160000.0, 6 << 30)]:
    with open(f"{t}/{name}.json", "w") as f:
        f.write("noise\n" + json.dumps({"run": "torch-" + name, "world": 2, "median_ms": 16 * 1024 / tok * 1e3,
                                        "tokens_per_s": tok, "peak_mem_bytes": 30 << 30,
                                        "state_bytes": state, "compiled": name == "ddp"}) + "\n")
PY
sec="350m" shape="24	1024	50257	1024"
printf '%s\n' \
  "$sec	gtp	GTP2	2	16	$shape	$tmp/gtp2.jsonl	$tmp/gtp2.log	" \
  "$sec	gtp	DP2	2	16	$shape	$tmp/dp2.jsonl	$tmp/dp2.log	" \
  "$sec	torch	FSDP2	2	16	$shape	$tmp/fsdp2.json	-	" \
  "$sec	torch	DDP	2	16	$shape	$tmp/ddp.json	-	torch.compile" \
  "$sec	skip	GTP8	8	16	$shape	-	-	needs 8 GPUs, 2 found" \
  "$sec	torch	GONE	2	16	$shape	$tmp/missing.json	-	" \
  "weak-$sec	gtp	GTP2	2	16	$shape	$tmp/gtp2.jsonl	$tmp/gtp2.log	" \
  "weak-$sec	gtp	GTP2·DP2	4	32	$shape	$tmp/dp2.jsonl	$tmp/dp2.log	" > "$tmp/runs.tsv"
python3 "$dir/dist_table.py" "$tmp/runs.tsv" --ref GTP2 --weak_target 0.93 \
  --check "tokens:GTP2/DP2>=0.95" --check "tokens:GTP2/FSDP2>=2" --check "tokens:GTP2/DDP>=1.1" \
  --check "state:GTP2/DP2<=0.55" --check "comm:GTP2<=0.05" --check "tokens:GTP8/DP2>=1" | tee "$tmp/dist.txt"
expect "$tmp/dist.txt" "### 350m: L=24 C=1024 V=50257 T=1024"
expect "$tmp/dist.txt" "| GTP2 | 2 | 16 | 100.00 | 163840 | 81920 | "
expect "$tmp/dist.txt" "| 40.00 GiB | 2.64 GiB (est.) | 6.00 GiB | 3.00 ms (3.0%) | 1.000 |"
expect "$tmp/dist.txt" "| DP2 | 2 | 16 | 98.00 | 167184 | 83592 | "
expect "$tmp/dist.txt" "| FSDP2 | 2 | 16 | 327.68 | 50000 | 25000 | "
expect "$tmp/dist.txt" "| 30.00 GiB | 3.00 GiB | — | — | 0.305 |"
expect "$tmp/dist.txt" "| DDP (torch.compile) | 2 | 16 |"
expect "$tmp/dist.txt" "| GTP8 | 8 | 16 | SKIP: needs 8 GPUs, 2 found |"
expect "$tmp/dist.txt" "| GONE | 2 | 16 | SKIP: no result ("
expect "$tmp/dist.txt" "MET: GTP2 / DP2 tokens/s 0.980x (target >= 0.95)"
expect "$tmp/dist.txt" "MET: GTP2 / FSDP2 tokens/s 3.277x (target >= 2)"
expect "$tmp/dist.txt" "NOT MET: GTP2 / DDP tokens/s 1.024x (target >= 1.1)"
expect "$tmp/dist.txt" "MET: GTP2 / DP2 weight+grad+optimizer bytes 0.500x (target <= 0.55)"
expect "$tmp/dist.txt" "MET: GTP2 exposed comm 3.0% of the step (target <= 0.05)"
grep -q "GTP8 / DP2" "$tmp/dist.txt" && fail "a check on a skipped run printed"
expect "$tmp/dist.txt" "| GTP2·DP2 | 4 | 32 | 98.00 | 334367 | 83592 |"
expect "$tmp/dist.txt" "| 2.041 | 102.0% |"
expect "$tmp/dist.txt" "MET: weak scaling 2 → 4 GPUs efficiency 102.0% (target >= 93%)"
echo "dist_table.py: ok"

# 5. scaling.sh / two_gpu.sh selection (dry run).
bash "$dir/scaling.sh" 8 --dry_run > "$tmp/s8.txt"
[[ "$(count "$tmp/s8.txt" '^SKIP')" == 0 ]] || fail "scaling N=8 skipped something"
# 2 models × (5 layouts + FSDP2) + 3 weak points.
[[ "$(count "$tmp/s8.txt" '^RUN')" == 15 ]] || { cat "$tmp/s8.txt"; fail "scaling N=8 runs"; }
grep -q "^RUN tools_gtprun_gtprun --nproc 8 .*/1.3b/gtp_tp2gtp4 .*model.n_embd=2048.*train.global_batch=64,.*parallel.tp=2,parallel.tp_num_weight_shards=8$" "$tmp/s8.txt" || fail "1.3b TP2·GTP4"
grep -q "^RUN python3 -m torch.distributed.run --standalone --nproc_per_node 8 .*torch_dist.py --mode fsdp2 --n_layer 24 --n_embd 1024 .*--global_batch 64 " "$tmp/s8.txt" || fail "FSDP2 at 8"
grep -q "^RUN .*--nproc 4 .*/weak-350m/gtp_gtp2dp2 .*train.global_batch=32,.*tp_num_weight_shards=2$" "$tmp/s8.txt" || fail "weak GTP2·DP2"
bash "$dir/scaling.sh" 4 --dry_run --models 350m > "$tmp/s4.txt"
expect "$tmp/s4.txt" "layouts: dp8 gtp2dp4 gtp4dp2 gtp8 tp2gtp4 dp4 gtp2dp2 gtp4 tp2gtp2,"
expect "$tmp/s4.txt" "SKIP 350m GTP8: needs 8 GPUs, 4 found"
expect "$tmp/s4.txt" "SKIP weak-350m GTP2·DP4: needs 8 GPUs, 4 found"
[[ "$(count "$tmp/s4.txt" '^RUN')" == 7 ]] || { cat "$tmp/s4.txt"; fail "scaling N=4 runs"; }
GLOBAL=32 bash "$dir/scaling.sh" 8 --dry_run --models 350m --layouts "dp8 tp2gtp4" --weak "" --torch "" > "$tmp/s8c.txt"
expect "$tmp/s8c.txt" "SKIP 350m DP8: global batch 32 is not a multiple of micro-batch 8 x 8 lanes"
if bash "$dir/scaling.sh" 8 --dry_run --models 7b > "$tmp/bad.txt" 2>&1; then fail "scaling accepted a bad model"; fi
bash "$dir/two_gpu.sh" 1 --dry_run > "$tmp/t1.txt"
expect "$tmp/t1.txt" "two_gpu: 1 GPU(s): degraded smoke test"
expect "$tmp/t1.txt" "# 350m GTP2: gtp on 1 GPUs (degraded: needs 2 GPUs, ran on 1)"
grep -q "^RUN tools_gtprun_gtprun --nproc 1 .*train.micro_batch=8,train.global_batch=16,.*parallel.world_size=1," "$tmp/t1.txt" || fail "degraded GTP2 command"
grep -q "^RUN python3 -m torch.distributed.run --standalone --nproc_per_node 1 .*--mode ddp .*--global_batch 16 " "$tmp/t1.txt" || fail "degraded DDP"
bash "$dir/two_gpu.sh" 8 --dry_run > "$tmp/t2.txt"
[[ "$(count "$tmp/t2.txt" '^RUN')" == 4 ]] || fail "two_gpu runs"
grep -q "^RUN tools_gtprun_gtprun --nproc 2 .*/350m/gtp_gtp2 .*model.n_layer=24,model.n_embd=1024,model.n_head=16,.*train.global_batch=16,.*tp_num_weight_shards=2$" "$tmp/t2.txt" || fail "two_gpu GTP2"
grep -q "^RUN python3 -m torch.distributed.run --standalone --nproc_per_node 2 .*--mode fsdp2 " "$tmp/t2.txt" || fail "two_gpu FSDP2"
echo "scaling/two_gpu selection: ok"

# 6. End to end on the CPU: UCX processes, a tiny model.
export GTP_TRAIN="$train" GTPRUN="$gtprun" DEVICE=cpu
OUT="$tmp/out" N_LAYER=2 N_EMBD=32 F32_STEPS=3 bash "$dir/nccl_parity.sh" 2 --precision f32 --cells "gtp2 dp2 dp1 gtp4" > "$tmp/p.txt" 2>&1 \
  || { cat "$tmp/p.txt"; fail "nccl_parity on the CPU"; }
cat "$tmp/p.txt"
expect "$tmp/p.txt" "| GTP2 | 2 | f32 | 3 |"
grep -qE "^\| GTP2 .* \| PASS \|" "$tmp/p.txt" || fail "GTP2 not PASS"
grep -qE "^\| DP2 .* \| PASS \|" "$tmp/p.txt" || fail "DP2 not PASS"
grep -qE "^\| 1 rank under gtprun .* \| PASS \|" "$tmp/p.txt" || fail "1 rank not PASS"
expect "$tmp/p.txt" "| GTP4 | 4 | f32 | — | — | — | 1e-5 | SKIP | needs 4 ranks, at most 2 here (--max_ranks) |"
expect "$tmp/p.txt" "parity: 3 PASS, 0 FAIL, 1 SKIP"
# bf16 with BF16_MAX_TOL under the floor (4e-3): every measured tolerance is
# above it, so the cell must fail unrun, naming the fix, and the script exit 1.
rc=0
OUT="$tmp/out" N_LAYER=2 N_EMBD=32 BF16_STEPS=3 BF16_MAX_TOL=1e-3 bash "$dir/nccl_parity.sh" 2 --precision bf16 --cells "gtp2" \
  > "$tmp/pmax.txt" 2>&1 || rc=$?
cat "$tmp/pmax.txt"
# Two runs with the same OUT (one device call): the second's table and logs go
# to nccl_parity.2, the first's stay.
expect "$tmp/out/nccl_parity/table.md" "| GTP2 | 2 | f32 | 3 |"
expect "$tmp/out/nccl_parity.2/table.md" "| GTP2 | 2 | bf16 |"
[[ -s "$tmp/out/nccl_parity/logs.tar.gz" && -s "$tmp/out/nccl_parity.2/logs.tar.gz" ]] || fail "OUT logs"
expect "$tmp/pmax.txt" 'table and logs in $OUT/nccl_parity.2'
[[ $rc == 1 ]] || fail "BF16_MAX_TOL: exit $rc, want 1"
grep -qE "^\| GTP2 \| 2 \| bf16 \| — .* \| FAIL \| tolerance .* is above BF16_MAX_TOL=1e-3: .*lower BF16_LR" "$tmp/pmax.txt" \
  || fail "BF16_MAX_TOL: GTP2 not failed by the cap"
expect "$tmp/pmax.txt" "parity: 2 PASS, 1 FAIL, 0 SKIP"
# PyTorch replaced: a fake interpreter answers torch.distributed.run with a summary.
cat > "$tmp/fake_python" <<'SH'
#!/usr/bin/env bash
if [[ "$1" == -m && "$2" == torch.distributed.run ]]; then
  json="" mode=""
  while (($#)); do case "$1" in --json) json="$2" ;; --mode) mode="$2" ;; esac; shift; done
  [[ "$mode" == ddp ]] && { echo "error: fake ddp failure"; exit 3; }
  echo '{"run": "torch-'"$mode"'", "world": 2, "median_ms": 10.0, "tokens_per_s": 25600.0, "peak_mem_bytes": 1048576, "state_bytes": 524288, "compiled": false}' > "$json"
  exit 0
fi
exec python3 "$@"
SH
chmod +x "$tmp/fake_python"
PYTHON="$tmp/fake_python" VOCAB=256 SEQ=64 STEPS=4 SKIP=1 MICRO=2 OUT="$tmp/out" \
  bash "$dir/scaling.sh" 2 --models tiny --layouts "gtp2 dp2 gtp4" --torch "fsdp2 ddp" --ref DP2 \
  --check "state:GTP2/DP2<=0.55" > "$tmp/s.txt" 2>&1 || { cat "$tmp/s.txt"; fail "scaling on the CPU"; }
cat "$tmp/s.txt"
grep -qE "^\| GTP2 \| 2 \| 4 \| [0-9.]+ \| [0-9]+ \| [0-9]+ \| [0-9.]+% \| [0-9.]+ MiB \| [0-9.]+ MiB \(est.\) \| [0-9.]+ MiB \| [0-9.]+ ms \([0-9.]+%\) \| [0-9.]+ \|$" "$tmp/s.txt" || fail "GTP2 row"
grep -qE "^\| DP2 \| 2 \| 4 \| .* \| 1.000 \|$" "$tmp/s.txt" || fail "DP2 row"
expect "$tmp/s.txt" "| GTP4 | 4 | 4 | SKIP: needs 4 GPUs, 2 found |"
expect "$tmp/s.txt" "| FSDP2 | 2 | 4 | 10.00 | 25600 | 12800 |"
expect "$tmp/s.txt" "| DDP | 2 | 4 | SKIP: failed (rc 3): error: fake ddp failure |"
expect "$tmp/s.txt" "MET: GTP2 / DP2 weight+grad+optimizer bytes 0.5"
expect "$tmp/s.txt" "### weak-tiny"
[[ -s "$tmp/out/scaling/table.md" && -s "$tmp/out/scaling/logs.tar.gz" ]] || fail "no table / logs under \$OUT"
[[ -z "$(find "$tmp" -path '*gtp_scaling.*' -name checkpoints)" ]] || fail "checkpoints left behind"
echo ok
