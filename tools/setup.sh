#!/usr/bin/env bash
# Installs everything gtp needs on a fresh Debian 12 machine. Idempotent:
# re-running does nothing when all packages are present. Needs root (or sudo)
# and Debian's package archive; nothing else is downloaded (abseil's source for
# --config=tsan is Debian's source package, unpacked once under /opt/gtp). CUDA
# 13 is expected preinstalled under /usr/local/cuda (it is, on the project's
# machines); CPU-only builds still need its headers and nvcc to compile the CUDA
# sources.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap bazel-rules-java bazel-platforms   # Bazel 4.2.3 (WORKSPACE mode)
  g++ libabsl-dev libprotobuf-dev protobuf-compiler  # C++ libs
  libucx-dev ucx-utils libnuma-dev                   # UCX host communication
  libopenblas-dev                                    # CPU BLAS
  libgtest-dev libgmock-dev libbenchmark-dev         # tests and benchmarks
  zlib1g-dev python3
  clang lld libclang-rt-14-dev                       # fuzzing (tools/fuzz/run.sh): libFuzzer + sanitizers
  bazel-skylib dpkg-dev                              # ThreadSanitizer's abseil (below): its BUILD files, apt-get source
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

# ThreadSanitizer (--config=tsan, docs/RELIABILITY.md) needs an abseil built with -fsanitize=thread:
# Debian's libabsl is not, and TSan then reports every absl::Mutex hand-off as a race. Bazel builds
# abseil's own source under that config only; deps.bzl's @com_google_absl points at this directory.
# The source comes from Debian's source package (a deb-src twin of the existing deb entries).
ABSL_VERSION=20220623.1
ABSL_SRC=/opt/gtp/abseil-$ABSL_VERSION
if [[ ! -f $ABSL_SRC/absl/BUILD.bazel ]]; then
  if ! apt-cache showsrc abseil 2>/dev/null | grep -q "^Version: $ABSL_VERSION-"; then
    if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
      sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources \
        | $SUDO tee /etc/apt/sources.list.d/gtp-deb-src.sources >/dev/null
    else
      sed -n 's/^deb /deb-src /p' /etc/apt/sources.list | $SUDO tee /etc/apt/sources.list.d/gtp-deb-src.list >/dev/null
    fi
    echo "setup: added deb-src entries (/etc/apt/sources.list.d/gtp-deb-src.*) for abseil's source"
    $SUDO apt-get update -qq
  fi
  tmp=$($SUDO mktemp -d /opt/gtp.XXXXXX)
  if ! out=$(cd "$tmp" && $SUDO apt-get source -qq abseil 2>&1); then
    echo "$out" >&2; echo "setup: apt-get source abseil failed" >&2; $SUDO rm -rf "$tmp"; exit 1
  fi
  if [[ ! -f $tmp/abseil-$ABSL_VERSION/absl/BUILD.bazel ]]; then
    echo "setup: apt-get source abseil did not give abseil-$ABSL_VERSION: $(ls "$tmp")" >&2
    $SUDO rm -rf "$tmp"; exit 1
  fi
  $SUDO mkdir -p /opt/gtp
  $SUDO rm -rf "$ABSL_SRC"
  $SUDO mv "$tmp/abseil-$ABSL_VERSION" "$ABSL_SRC"
  $SUDO rm -rf "$tmp"
  echo "setup: abseil $ABSL_VERSION source in $ABSL_SRC (for --config=tsan)"
fi

if [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
  echo "setup: WARNING: /usr/local/cuda/bin/nvcc not found; CUDA sources will not build." >&2
  echo "setup: install CUDA 13.0 under /usr/local/cuda (the CUDA 13.0 toolkit: nvcc, cuBLAS, cuDNN 9, NCCL 2.28)." >&2
  exit 1
fi
echo "setup: ok ($(bazel --version 2>/dev/null || echo bazel), $(/usr/local/cuda/bin/nvcc --version | tail -1))"
