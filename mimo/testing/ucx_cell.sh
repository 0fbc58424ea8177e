#!/usr/bin/env bash
# One MIMO layout as UCX processes under gtprun (mimo/testing/ucx_check).
set -euo pipefail
gtprun="$1" check="$2" nproc="$3" layout="$4"
exec "$gtprun" --nproc "$nproc" -- "$check" --layout="$layout"
