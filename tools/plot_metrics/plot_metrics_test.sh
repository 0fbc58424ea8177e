#!/usr/bin/env bash
# plot_metrics (the C++ renderer) on made-up metrics files: a good one (with a
# skipped step and an unfinished last line) is plotted; a directory, a line
# that is no record, a value that is no number and an all-NaN run are refused
# naming what is wrong, writing no PNG.
set -euo pipefail
plot="$1"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*"; exit 1; }
# expect_refused NAME TEXT FILE: exit 1, TEXT on stderr, no PNG.
expect_refused() {
  local rc=0
  "$plot" "$3" "$tmp/$1.png" > "$tmp/out" 2> "$tmp/err" || rc=$?
  [ "$rc" = 1 ] || fail "$1: exit $rc, want 1 ($(cat "$tmp/err"))"
  grep -qF -- "$2" "$tmp/err" || fail "$1: stderr lacks '$2': $(cat "$tmp/err")"
  [ ! -e "$tmp/$1.png" ] || fail "$1: wrote a PNG"
  echo "$1: refused: $(cat "$tmp/err")"
}

{
  for s in 1 2 3 4; do echo "{\"step\": $s, \"loss\": 5.$s, \"tokens_per_s\": 1000.0}"; done
  echo '{"step": 4, "val_loss": 5.1}'
  echo '{"step": 5, "loss": nan, "tokens_per_s": 1000.0}'
  printf '{"step": 6, "loss": 4.'  # killed mid-write
} > "$tmp/good.jsonl"
"$plot" "$tmp/good.jsonl" "$tmp/good.png" > "$tmp/out" 2> "$tmp/err" || fail "good: $(cat "$tmp/err")"
grep -qF "loss (blue: train, red: validation): steps 1..4, values 5.1..5.4" "$tmp/out" || fail "good: $(cat "$tmp/out")"
head -c 8 "$tmp/good.png" | od -An -tx1 | grep -q "89 50 4e 47 0d 0a 1a 0a" || fail "good: not a PNG"

mkdir -p "$tmp/dir"
expect_refused directory "is a directory: give a run's metrics file" "$tmp/dir"
printf 'garbage\n{"step": 1, "loss": 5.0}\n' > "$tmp/garbage.jsonl"
expect_refused garbage "line 1 is not a metrics record" "$tmp/garbage.jsonl"
printf '{"step": "x", "loss": 5.0}\n' > "$tmp/step_text.jsonl"
expect_refused step_text "line 1 is not a metrics record" "$tmp/step_text.jsonl"
printf '{"step": 1, "loss": 5.0}\n{"step": 2, "loss": "y"}\n' > "$tmp/loss_text.jsonl"
expect_refused loss_text 'line 2: "loss" is not a number' "$tmp/loss_text.jsonl"
printf '{"step": 1, "loss": nan}\n{"step": 2, "loss": -nan}\n' > "$tmp/nan.jsonl"
expect_refused all_nan "all 2 losses are NaN or Inf" "$tmp/nan.jsonl"
: > "$tmp/empty.jsonl"
expect_refused empty "no loss records in" "$tmp/empty.jsonl"
echo "plot_metrics checks passed"
