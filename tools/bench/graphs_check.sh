#!/usr/bin/env bash
# tools/bench/graphs_check.sh — CUDA graphs on vs off (GPU machine, repo root,
# after `tools/gpu.sh bundle`, carried): GPT-2 124M, 50 steps each; prints
# how many steps have bit-identical losses and grad norms, and both median
# step times (steps 11-50).
set -u
for g in off on; do
  rm -rf /tmp/g_$g; bash tools/gpu.sh run recipes_gpt_124m_train --run_dir /tmp/g_$g --set train.steps=50,checkpoint.no_resume=true,train.cuda_graphs=$g > /tmp/g_$g.log 2>&1 || { echo "graphs=$g failed"; tail -15 /tmp/g_$g.log; }
  grep -E "gtp |captured|step +(1|2|3|10|50)/|rror" /tmp/g_$g.log
done
python3 - <<'PY'
import json
def m(p):
    out={}
    for l in open(p):
        r=json.loads(l)
        if "loss" in r: out[r["step"]]=(r["loss"], r["ms"], r["grad_norm"])
    return out
a=m("/tmp/g_off/metrics.jsonl"); b=m("/tmp/g_on/metrics.jsonl")
same=[s for s in a if s in b and a[s][0]==b[s][0] and a[s][2]==b[s][2]]
print("steps with bit-identical loss and grad norm: %d of %d" % (len(same), len(a)))
diff=[s for s in a if s in b and a[s][0]!=b[s][0]]
print("first differing steps:", diff[:5])
import statistics
print("median ms/step steps 11-50: off %.2f  on %.2f" % (statistics.median(a[s][1] for s in range(11,51)), statistics.median(b[s][1] for s in range(11,51))))
PY
