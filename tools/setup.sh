#!/usr/bin/env bash
# Installs everything gtp needs on a fresh Debian 12 machine. Idempotent:
# re-running does nothing when all packages are present. Needs root (or sudo)
# and Debian's package archive; nothing else is downloaded. CUDA 13 is expected
# preinstalled under /usr/local/cuda (it is, on the project's machines); CPU-only
# builds still need its headers and nvcc to compile the CUDA sources.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap bazel-rules-java bazel-platforms   # Bazel 4.2.3 (WORKSPACE mode)
  g++ libabsl-dev libprotobuf-dev protobuf-compiler  # C++ libs
  libucx-dev ucx-utils libnuma-dev                   # UCX host communication
  libopenblas-dev                                    # CPU BLAS
  libgtest-dev libgmock-dev libbenchmark-dev         # tests and benchmarks
  zlib1g-dev python3
  clang lld libclang-rt-14-dev                       # fuzzing (tools/fuzz/run.sh): libFuzzer + sanitizers
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "setup: all Debian packages present"
fi

if [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
  echo "setup: WARNING: /usr/local/cuda/bin/nvcc not found; CUDA sources will not build." >&2
  echo "setup: install CUDA 13.0 under /usr/local/cuda (the CUDA 13.0 toolkit: nvcc, cuBLAS, cuDNN 9, NCCL 2.28)." >&2
  exit 1
fi
echo "setup: ok ($(bazel --version 2>/dev/null || echo bazel), $(/usr/local/cuda/bin/nvcc --version | tail -1))"
