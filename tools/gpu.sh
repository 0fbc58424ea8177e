#!/usr/bin/env bash
# Build here, run on the GPU machine (CUDA 13, NCCL 2.28 and the GPU there; nothing of ours installed).
#
#   tools/gpu.sh bundle [TARGET...]   (here) build the targets (default: every
#                                     test tagged `gpu` plus //tools/bench/...
#                                     binaries), copy them and the non-system,
#                                     non-CUDA shared libraries they need into
#                                     .bundle/bundle.tar.xz (git-ignored).
#   tools/gpu.sh run [BINARY ARGS...] (GPU machine) unpack the bundle; with no
#                                     arguments run every bundled test and print
#                                     a summary (each binary at most
#                                     GTP_TEST_TIMEOUT seconds, default 300;
#                                     with OUT set, each result line also in
#                                     $OUT/gpu_suite.txt as it is known, and
#                                     the logs in $OUT/gpu_test_logs.tar.gz);
#                                     otherwise run one bundled binary.
#
# On the device tool: run(command="bash tools/gpu.sh run", carry=[".bundle"]).
# NCCL and cuBLAS come from the GPU machine; they are never bundled.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUNDLE="${GTP_BUNDLE_DIR:-$ROOT/.bundle}"  # another folder for a second, concurrent bundle

bundle() {
  cd "$ROOT"
  local targets=("$@")
  if ((${#targets[@]} == 0)); then
    mapfile -t targets < <(bazel query 'attr(tags, "\bgpu\b", tests(//...))' 2>/dev/null)
    mapfile -t -O "${#targets[@]}" targets < <(bazel query 'attr(tags, "\bbenchmark\b", kind(cc_binary, //...))' 2>/dev/null)
    targets+=("//tools/gtprun:gtprun")  # multi-process GPU tests find it beside themselves
    targets+=("//tools/ckpt:ckpt")  # tools/bench/bench.sh exports checkpoints with it
    targets+=("//data/tokenizer:tokenize")  # tools/hf/tokenizer_check.py compares it with HF's
    targets+=("//tools/data:make_indexed" "//tools/generate:generate")  # tools/hf/hf_e2e.py
    targets+=("//tools/plan:plan")  # plan calibrate (tools/plan/README.md)
  fi
  echo "gpu.sh: building ${#targets[@]} targets"
  bazel build -c opt "${targets[@]}"
  # Not the bazel-bin symlink: another build may have moved it meanwhile.
  local bin_dir
  bin_dir="$(bazel info -c opt bazel-bin 2>/dev/null)"
  local stage
  stage="$(mktemp -d)"
  mkdir -p "$stage/bin" "$stage/lib"
  for t in "${targets[@]}"; do
    local path
    path="$bin_dir/$(echo "${t#//}" | tr ':' '/')"
    [[ -x "$path" ]] || { echo "gpu.sh: no binary at $path" >&2; exit 1; }
    local name
    name="$(echo "${t#//}" | tr '/:' '__')"
    cp "$path" "$stage/bin/$name"
    strip --strip-debug "$stage/bin/$name"
    # Runfiles-free: our binaries are linked statically except system libs.
    ldd "$path" | awk '/=>/ {print $3}' | while read -r lib; do
      case "$lib" in
        */libc.so*|*/libm.so*|*/libdl.so*|*/librt.so*|*/libpthread.so*|*/ld-linux*|*/libstdc++.so*|*/libgcc_s.so*) ;;
        /usr/local/cuda*|*/libcuda.so*|*/libcublas*|*/libnccl*|*/libcudart*) ;;
        *) cp -nL "$lib" "$stage/lib/" ;;
      esac
    done
    if [[ "$t" == *test* ]]; then echo "$name" >> "$stage/tests.txt"; fi
  done
  mkdir -p "$BUNDLE"
  # xz -9: a 64 MiB window spans many binaries, which share most of their
  # code (the bundle must fit the device tool's carry beside the tree).
  tar -C "$stage" -cf - . | xz -9 -T1 > "$BUNDLE/bundle.tar.xz"
  rm -rf "$stage"
  echo "gpu.sh: $(du -h "$BUNDLE/bundle.tar.xz" | cut -f1) in $BUNDLE/bundle.tar.xz"
}

run() {
  local dir=/tmp/gtp_bundle
  rm -rf "$dir" && mkdir -p "$dir"
  tar -C "$dir" -xJf "$BUNDLE/bundle.tar.xz"
  export LD_LIBRARY_PATH="$dir/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
  export NCCL_NVLS_ENABLE=0
  export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-8}"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  if (($# > 0)); then
    local bin="$1"; shift
    exec "$dir/bin/$bin" "$@"
  fi
  local pass=0 fail=0 skip=0 failed=() skipped=() logs=/tmp/gtp_logs
  mkdir -p "$logs"
  # Each result line also goes to $OUT/gpu_suite.txt as it is known, so a
  # suite cut short by the call's limit still says which binaries passed.
  local progress=/dev/null
  if [[ -n "${OUT:-}" ]]; then progress="$OUT/gpu_suite.txt"; : > "$progress"; fi
  while read -r t; do
    local log="$logs/$t.log"
    # A hung binary (a kernel that never finishes) fails alone instead of
    # taking the device call's whole time.
    if timeout "${GTP_TEST_TIMEOUT:-300}" "$dir/bin/$t" >"$log" 2>&1; then
      local ok skipped_n
      ok=$(grep -c '^\[       OK \]' "$log" || true)
      skipped_n=$(grep -c '^\[  SKIPPED \] .* ms)$' "$log" || true)
      if ((ok == 0)); then
        # Every test skipped (no GPU, too few GPUs): nothing was checked.
        skip=$((skip + 1)); skipped+=("$t")
        echo "SKIP $t (all $skipped_n tests skipped: $(grep -m1 -A1 '^\[  SKIPPED \]\|Skipped' "$log" | tail -1))" | tee -a "$progress"
        continue
      fi
      pass=$((pass + 1))
      echo "PASS $t ($ok ok, $skipped_n skipped)" | tee -a "$progress"
    else
      fail=$((fail + 1)); failed+=("$t")
      echo "FAIL $t" | tee -a "$progress"; grep -E 'Failure|FAILED|error|Error|check failed' "$log" | head -20
    fi
  done < "$dir/tests.txt"
  if [[ -n "${OUT:-}" ]]; then tar -C "$logs" -czf "$OUT/gpu_test_logs.tar.gz" .; fi
  echo "gpu.sh: $pass passed, $skip skipped entirely ${skipped[*]:-}, $fail failed ${failed[*]:-}" | tee -a "$progress"
  ((fail == 0))
}

cmd="${1:-}"; shift || true
case "$cmd" in
  bundle) bundle "$@" ;;
  run) run "$@" ;;
  *) echo "usage: tools/gpu.sh bundle [TARGET...] | run [BINARY ARGS...]" >&2; exit 2 ;;
esac
