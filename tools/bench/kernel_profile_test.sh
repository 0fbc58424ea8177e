#!/usr/bin/env bash
# kernel_profile.py without a GPU: --from_csv on a hand-made ncu CSV whose
# kernel times are chosen so every figure is known. Two counted steps (the
# first of three optimizer launches skipped), each:
#   GEMMs 2.0 ms (nvjet 1.5 + gtp's own wgmma 0.5), attention 1.0 (cuDNN),
#   fp8 quantisers 0.5, MoE routing 0.25, optimizer 0.125, other 0.125
# = 4.0 ms; the GEMMs 2x faster give 3.0 ms (old/new 1.333x), 1.5x faster
# 3.333 ms (1.200x). The skipped step's kernels (10 ms of nvjet) must not
# count. The same steps with the optimizer launched twice a step (an MoE
# model's dense and expert parameter groups: 0.0625 ms each) must give the
# same figures: the steps are --steps, not the optimizer's launches. Bad
# arguments and files (a --steps the launches do not fit) must stop it with a
# message.
set -euo pipefail
script="$1"
dir="${TEST_TMPDIR:-$(mktemp -d)}"
csv="$dir/profile.csv"
write_csv() {  # groups: optimizer launches a step
  local groups="$1"
  echo '"ID","Process ID","Kernel Name","Metric Name","Metric Unit","Metric Value"'
  id=0
  row() {  # name unit value
    echo "\"$id\",\"1\",\"$1\",\"gpu__time_duration.sum\",\"$2\",\"$3\""
    echo "\"$id\",\"1\",\"$1\",\"launch__grid_size\",\"\",\"132\""
    id=$((id + 1))
  }
  row "nvjet_tst_256x128_64x4_1x2_h_bz_coopA_NNT" msecond 10
  adamw() {  # ns in all, split over the groups
    for ((g = 0; g < groups; g++)); do
      row "void gtp::kernels::cuda::(anonymous namespace)::AdamWMultiKernel(gtp::kernels::AdamWParams)" nsecond "$(($1 / groups))"
    done
  }
  adamw 100000
  for step in 1 2; do
    row "nvjet_tst_256x128_64x4_1x2_h_bz_coopA_NNT" usecond "1,500"
    row "void gtp::kernels::fp8::cuda::(anonymous namespace)::WgmmaGemmKernel<128, 2>(const CUtensorMap *)" nsecond "500,000"
    row "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_3_64x64x64_4x1x1_kernel0_0" usecond 600
    row "cudnn::matmul_dq(float *)" usecond 400
    row "void gtp::kernels::fp8::cuda::(anonymous namespace)::QuantizeRowsAndTransposedKernel<__nv_bfloat16, true>(const __nv_bfloat16 *, int)" usecond 500
    row "void gtp::layers::moe::cuda::(anonymous namespace)::ForwardKernel<float>(const float *)" usecond 250
    row "void gtp::Mystery(int)" usecond 125
    adamw 125000
  done
}
write_csv 1 > "$csv"

out="$dir/out.txt"
want() {  # a line the output must hold, as is
  grep -qxF -- "$1" "$out" || { echo "missing: $1"; exit 1; }
}
check() {  # groups, how the header names them
  want "kernel_profile: 2 steps counted, 4.000 ms of kernel time per step, $((7 + $1)) launches per step ($2)"
  want "| GEMMs | 2.000 | 50.0 % | 2 |"
  want "| attention | 1.000 | 25.0 % | 2 |"
  want "| fp8 quantisers | 0.500 | 12.5 % | 1 |"
  want "| MoE routing | 0.250 | 6.2 % | 1 |"
  want "| optimizer | 0.125 | 3.1 % | $1 |"
  want "| other | 0.125 | 3.1 % | 1 |"
  want "kernel_profile: GEMMs 2x faster: 3.000 ms of kernel time per step, old/new 1.333x (the GEMMs 2.000 ms now, the rest 2.000 unchanged)"
  want "kernel_profile: GEMMs 1.5x faster: 3.333 ms of kernel time per step, old/new 1.200x (the GEMMs 2.000 ms now, the rest 2.000 unchanged)"
  want "| 37.5 % | 1.500 | 1 | \`nvjet_tst_256x128_64x4_1x2_h_bz_coopA_NNT\` |"
}
python3 "$script" --from_csv "$csv" --steps 3 --skip_steps 1 --gemm_speedup 2 1.5 > "$out"
cat "$out"
check 1 "1 optimizer launch a step"
csv2="$dir/profile2.csv"
write_csv 2 > "$csv2"
python3 "$script" --from_csv "$csv2" --steps 3 --skip_steps 1 --gemm_speedup 2 1.5 > "$out"
cat "$out"
check 2 "2 optimizer launches a step"

fails() {  # message-fragment args...: must exit non-zero and say it
  local msg="$1"; shift
  if python3 "$script" "$@" > "$dir/bad.txt" 2>&1; then cat "$dir/bad.txt"; echo "accepted: $*"; exit 1; fi
  grep -qF -- "$msg" "$dir/bad.txt" || { cat "$dir/bad.txt"; echo "no '$msg' for: $*"; exit 1; }
}
fails "--gemm_speedup needs finite values > 0" --from_csv "$csv" --gemm_speedup 0
fails "--gemm_speedup needs finite values > 0" --from_csv "$csv" --gemm_speedup nan
fails "cannot read --from_csv" --from_csv "$dir/none.csv"
echo "not a csv" > "$dir/junk.csv"
fails "has no ncu CSV header" --from_csv "$dir/junk.csv"
fails "3 optimizer launches do not split evenly into --steps 2 steps" --from_csv "$csv" --steps 2 --skip_steps 1
fails "step 2 of --steps 6 (1 optimizer launch a step) has no GEMM" --from_csv "$csv2" --steps 6 --skip_steps 1
echo ok
