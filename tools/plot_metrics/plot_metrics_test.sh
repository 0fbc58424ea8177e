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
# The words are drawn: the top panel's title "LOSS" (3x5 font, 3 pixels a dot,
# centred at y 6) dot for dot, the legend's blue line and the "STEP" axis name
# (before 2026-12-04 the plot had no words but numbers).
python3 - "$tmp/good.png" <<'PY' || fail "good: the title, legend or axis name is not drawn"
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
w, h = struct.unpack(">II", data[16:24])
idat, pos = b"", 8
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    if kind == b"IDAT":
        idat += data[pos + 8:pos + 8 + n]
    pos += 12 + n
raw = zlib.decompress(idat)
px = lambda x, y: raw[y * (w * 3 + 1) + 1 + x * 3: y * (w * 3 + 1) + 4 + x * 3]
glyph = {"L": "100100100100111", "O": "010101101101010", "S": "011100010001110"}
x0, y0, scale = (w - 4 * 4 * 3) // 2, 6, 3
for k, c in enumerate("LOSS"):
    for i, bit in enumerate(glyph[c]):
        x, y = x0 + k * 4 * scale + (i % 3) * scale + 1, y0 + (i // 3) * scale + 1
        want = b"\x00\x00\x00" if bit == "1" else b"\xff\xff\xff"
        assert px(x, y) == want, (c, i, px(x, y))
assert any(px(x, y) == b"\x1f\x77\xb4" for x in range(w - 300, w) for y in range(40, 60)), "legend"
assert any(px(x, y) == b"\x00\x00\x00" for x in range(w - 80, w - 40) for y in range(380, 395)), "STEP"
print("words drawn")
PY

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
