#!/usr/bin/env bash
# compare.py and mirror.py on made-up runs: a gtp metrics.jsonl (with an
# evaluation line to ignore) and two torch_gpt.py summaries.
set -euo pipefail
compare="$1"
dir="$(dirname "$compare")"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
python3 - "$tmp" <<'PY'
import json, sys
t = sys.argv[1]
with open(t + "/metrics.jsonl", "w") as f:
    for s in range(1, 31):
        f.write(json.dumps({"step": s, "loss": 10.0 - 0.1 * s, "lr": 1e-4, "grad_norm": 1.0, "skipped": False,
                            "ms": 100.0 if s > 10 else 900.0, "tokens_per_s": 8192 / (0.1 if s > 10 else 0.9),
                            "mem_bytes": 1 << 30, "peak_mem_bytes": 3 << 30}) + "\n")
        if s == 20:
            f.write(json.dumps({"step": 20, "val_loss": 7.5}) + "\n")
for name, ms, dl in [("torch-eager", 80.0, 0.01), ("torch-compile", 50.0, -0.02)]:
    with open(t + "/%s.json" % name, "w") as f:
        f.write("log line\n" + json.dumps({"run": name, "median_ms": ms, "tokens_per_s": 8192 / (ms / 1e3),
                 "mfu": 0.1, "peak_mem_bytes": 2 << 30, "losses": [10.0 - 0.1 * s + dl for s in range(1, 31)],
                 "grad_norms": [1.1] * 30, "lrs": [1e-4] * 30}) + "\n")
PY
python3 "$compare" --gtp "$tmp/metrics.jsonl" --torch "$tmp/torch-eager.json" --torch "$tmp/torch-compile.json" \
  --torch "$tmp/missing.json" | tee "$tmp/out.txt"
expect() { grep -qF -- "$1" "$tmp/out.txt" || { echo "missing: $1"; exit 1; }; }
expect "8.5517e+08 FLOP/token"                       # GPT-2 124M, = recipes/trainer/mfu_test.cc
expect "| gtp | 100.00 | 81920 | 7.1% | 3.00 GiB | 0.500 |"   # 8.55e8 · 81920 / 989e12
expect "| torch-compile | 50.00 | 163840 | 10.0% | 2.00 GiB | 1.000 |"
expect "gtp / torch-eager: 0.800x the throughput"
expect "gtp vs torch-eager: steps 21..30: mean |Δ| 0.01, max |Δ| 0.01"
expect "gtp vs torch-compile: steps 21..30: mean |Δ| 0.02"
expect "grad-norm mean rel diff 0.0909"
expect "torch-eager vs torch-compile: steps 21..30: mean |Δ| 0.03"
grep -qE "^ +30 +7\.000000 +7\.010000 +6\.980000$" "$tmp/out.txt" || { echo "missing step 30 losses"; exit 1; }
# A hybrid run: no torch, no MFU.
python3 "$compare" --gtp "$tmp/metrics.jsonl" --gtp_name gtp-bf16 --layer_pattern "M*-M-" --n_layer 5 \
  | tee "$tmp/hybrid.txt"
grep -qF 'model: hybrid "M*-M-" L=5' "$tmp/hybrid.txt" || { echo "missing the hybrid model line"; exit 1; }
grep -qF "| gtp-bf16 | 100.00 | 81920 | — | 3.00 GiB | — |" "$tmp/hybrid.txt" || { echo "missing the hybrid row"; exit 1; }
# mirror.lr_at = optimizer/lr_schedule_test.cc's values, warmup clamped to the run's steps.
PYTHONPATH="$dir" python3 - <<'PY'
from mirror import lr_at, flop_per_token
assert lr_at(0, 1.0, 0.1, 4, 14) == 0.25 and lr_at(3, 1.0, 0.1, 4, 14) == 1.0
assert abs(lr_at(9, 1.0, 0.1, 4, 14) - 0.55) < 1e-6 and abs(lr_at(14, 1.0, 0.1, 4, 14) - 0.1) < 1e-7
assert lr_at(3, 2.0, 0.0, 2, 6, "linear") == 1.5 and lr_at(5, 2.0, 0.0, 2, 6, "linear") == 0.5
assert abs(lr_at(0, 1.0, 0.0, 10, 5) - 0.2) < 1e-7  # warmup = min(10, steps 5)
assert flop_per_token(50257, 1024, 12, 768) == 855166464.0
print("mirror ok")
PY
echo ok
