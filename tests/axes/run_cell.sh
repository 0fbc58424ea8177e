#!/usr/bin/env bash
# One matrix cell: run axes_check as threads (local) or as processes (ucx).
set -euo pipefail
backend="$1" world="$2" check="$3" gtprun="$4"
shift 4
if [ "$backend" = "ucx" ]; then
  exec "$gtprun" --nproc "$world" -- "$check" "$@"
fi
exec "$check" "$@"
