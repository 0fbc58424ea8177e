#!/usr/bin/env bash
# vlm_mimo learns from the images on its default 8-rank layout (encoder
# TP1·DP4 | language TP2·GTP2): the caption loss falls below what a model
# blind to the images can reach (log(2·6·4)/5 = 0.774 nats per predicted
# position), and the colour of unseen images is read far above chance.
set -euo pipefail
train="$1"
log="${TEST_TMPDIR:-/tmp}/vlm_mimo.log"
"$train" --steps=300 --log_every=50 --eval_batches=2 > "$log" 2>&1 || { cat "$log"; exit 1; }
cat "$log"
loss="$(awk '/^step +300\/300/ {print $4}' "$log")"
[[ -n "$loss" ]] || { echo "no step-300 line"; exit 1; }
python3 -c 'import sys; l = float(sys.argv[1]); sys.exit(0 if l < 0.65 else 1)' "$loss" ||
  { echo "loss $loss is not below the image-blind 0.774 by a margin"; exit 1; }
colour="$(sed -n 's/.*colour \([0-9.]*\)%.*/\1/p' "$log")"
python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) > 50 else 1)' "$colour" ||
  { echo "colour accuracy $colour% is not far above the 16.7% of chance"; exit 1; }
echo ok
