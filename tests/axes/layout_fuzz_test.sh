#!/usr/bin/env bash
# //tests/axes:layout_fuzz_test (issue 28): 32 random layouts from
# fuzz_layouts.py -- axis sizes 3, 5, 7 among them, model sizes drawn to fit
# (heads, FFN, batch, sequence, experts), every 6th layout broken on purpose
# and expected to be refused by name -- each run as threads (local) and as
# UCX processes (ucx), tolerances derived per run by axes_check's noise probe.
# About 50 s on 2 cores.
# The seed is fixed (28) so the test is deterministic; another seed, or
# today's date, through the environment:
#   bazel test //tests/axes:layout_fuzz_test --test_env=GTP_FUZZ_SEED=date
# A failure prints the seed and a replay command (--seed S --only INDEX).
set -euo pipefail
fuzz="$1" run_cell="$2" check="$3" gtprun="$4"
shift 4
seed="${GTP_FUZZ_SEED:-28}"
echo "layout_fuzz_test: seed ${seed}"
exec python3 "$fuzz" --seed "$seed" --count 32 --invalid_every 6 --backends local,ucx --timeout 120 \
  --run_cell "$run_cell" --axes_check "$check" --gtprun "$gtprun" "$@"
