#!/usr/bin/env bash
# plot.py on a made-up metrics.jsonl: its loader and EMA without matplotlib;
# with matplotlib a PNG, without it exit 2 and a message naming matplotlib.
set -euo pipefail
plot="$1"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
python3 - "$tmp/metrics.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for s in range(1, 21):
        f.write(json.dumps({"step": s, "loss": 5.0 - 0.1 * s, "lr": 1e-3 * min(1, s / 5), "skipped": False,
                            "tokens_per_s": 9000.0 + s}) + "\n")
        if s % 10 == 0:
            f.write(json.dumps({"step": s, "val_loss": 4.5 - 0.05 * s}) + "\n")
    f.write(json.dumps({"step": 20, "loss": 2.5}) + "\n")  # a resumed run logs step 20 again
    f.write('{"step": 21, "loss": nan, "grad_norm": -nan}\n')  # a skipped step, as C prints it
    f.write('{"step": 22, "loss": inf, "grad_norm": -inf}\n')
PY
python3 - "$plot" "$tmp/metrics.jsonl" <<'PY'
import importlib.util, sys
spec = importlib.util.spec_from_file_location("plot", sys.argv[1])
plot = importlib.util.module_from_spec(spec)
spec.loader.exec_module(plot)  # matplotlib is imported only by main()
s = plot.load(sys.argv[2])
assert [x for x, _ in s["loss"]] == list(range(1, 21)), s["loss"]
assert s["loss"][-1] == (20, 2.5), s["loss"][-1]
assert s["val_loss"] == [(10, 4.0), (20, 3.5)], s["val_loss"]
assert "skipped" not in s and "grad_norm" not in s
assert plot.ema([1.0, 2.0, 3.0], 0.0) == [1.0, 2.0, 3.0]
e = plot.ema([2.0, 2.0, 2.0], 0.9)  # debiased: a constant stays itself
assert all(abs(v - 2.0) < 1e-12 for v in e), e
e = plot.ema([0.0, 10.0], 0.5)  # (0.5·0 + 0.5·10) / (1 − 0.5²)
assert abs(e[1] - 10.0 * 0.5 / 0.75) < 1e-12, e
print("loader and EMA ok")
PY
rc=0
python3 "$plot" "$tmp/metrics.jsonl" "$tmp/out.png" --smooth 0.6 --title test > "$tmp/out" 2> "$tmp/err" || rc=$?
if python3 -c "import matplotlib" 2> /dev/null; then
  [ "$rc" = 0 ] || { echo "plot.py failed with matplotlib: $(cat "$tmp/err")"; exit 1; }
  head -c 8 "$tmp/out.png" | od -An -tx1 | grep -q "89 50 4e 47 0d 0a 1a 0a" || { echo "not a PNG"; exit 1; }
  echo "plotted: $(cat "$tmp/out")"
else
  [ "$rc" = 2 ] || { echo "without matplotlib: exit $rc, want 2"; exit 1; }
  grep -q "matplotlib is not installed" "$tmp/err" || { echo "message: $(cat "$tmp/err")"; exit 1; }
  echo "no matplotlib here: exit 2, '$(cat "$tmp/err")'"
fi
rc=0; python3 "$plot" "$tmp/metrics.jsonl" "$tmp/x.png" --smooth 1.5 2> /dev/null || rc=$?
[ "$rc" = 2 ] || { echo "--smooth 1.5: exit $rc, want 2"; exit 1; }
echo "plot.py checks passed"
