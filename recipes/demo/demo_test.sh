#!/usr/bin/env bash
# Runs the demo briefly and asserts the held-out loss fell by at least 35%.
set -euo pipefail
out="$("$1" --steps=120 --batch=4 --seq=32 --sample=0 --log_every=40)"
echo "$out"
line="$(grep '^held-out loss:' <<<"$out")"
read -r before after < <(awk '{print $3, $5}' <<<"$line")
awk -v b="$before" -v a="$after" 'BEGIN { if (!(a < 0.65 * b)) { print "loss did not fall enough: " b " -> " a; exit 1 } }'
