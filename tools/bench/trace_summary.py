#!/usr/bin/env python3
"""Where a traced step goes: sums the spans of a gtp Chrome trace by name.

    python3 tools/bench/trace_summary.py RUN_DIR/trace0.json [--steps N]

Layer numbers are folded ("h.3 bwd" and "h.7 bwd" count as "h.* bwd"), so
each row is one kind of work summed over the layers, divided by the number
of traced steps (N, default: the number of "optimizer" spans, else 1). Nested
spans are listed under their parents' totals, not subtracted from them.
"""
import argparse
import collections
import json
import re


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--steps", type=int, default=0)
    args = ap.parse_args()
    with open(args.trace) as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    total = collections.defaultdict(float)
    count = collections.Counter()
    for e in events:
        if e.get("ph") != "X":
            continue
        name = re.sub(r"\b(h|micro-batch)\.? ?\d+", r"\1.*", e["name"])
        total[name] += e["dur"]
        count[name] += 1
    steps = args.steps or count.get("optimizer", 0) or 1
    print("%-36s %10s %8s" % ("span (per step)", "ms", "calls"))
    for name, us in sorted(total.items(), key=lambda kv: -kv[1]):
        print("%-36s %10.3f %8d" % (name, us / 1000.0 / steps, count[name] // steps))


if __name__ == "__main__":
    main()
