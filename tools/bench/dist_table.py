#!/usr/bin/env python3
"""Markdown tables of multi-GPU runs: gtp layouts beside torch_dist.py runs
(tools/bench/two_gpu.sh, scaling.sh; stdlib only).

  python3 tools/bench/dist_table.py RUNS.tsv [--ref GTP2] [--skip 10] [--peak_tflops 989]
      [--check 'tokens:GTP2/DP2>=0.95'] [--check 'state:GTP2/DP2<=0.55'] [--check 'comm:GTP2<=0.05']

RUNS.tsv, one tab-separated line per run:

  section  kind  label  gpus  global_batch  n_layer  n_embd  vocab  seq_len  file  log  note

kind "gtp": file is the trainer's metrics.jsonl (rank 0: loss, ms,
tokens_per_s, comm_exposed_ms, mem_bytes, peak_mem_bytes per step), log its
output, whose banner "(X M on this rank)" gives the rank's parameter count;
kind "torch": file is torch_dist.py's summary JSON; kind "skip": a row saying
why it did not run (note). Rows group by section (one model and global
batch, or a weak-scaling series: a section whose name starts with "weak").

Per run: median ms/step over the steps after --skip, tokens/s (global
tokens per step ÷ median), tokens/s per GPU, MFU per GPU (mirror's
flop_per_token), peak memory per GPU (gtp: rank 0's allocator peak; torch:
the largest rank's max_memory_allocated), weight + grad + optimizer bytes
per GPU (gtp: the rank's parameters × 16 B — f32 master, f32 main grad, two
f32 Adam moments; an estimate from the banner: the trainer does not print an
allocator figure for them yet; torch: measured from the tensors, local
shards), memory in use after the step (gtp: the allocator's bytes in use at
the report, persistent buffers included), exposed communication (gtp:
median comm_exposed_ms and its share of the step; torch: —), and the
tokens/s ratio to --ref. A weak section adds the scaling efficiency
(tokens/s per GPU ÷ that of its fewest-GPU run; with --weak_target a MET /
NOT MET line for its largest run).

--check KIND:A/B>=X | KIND:A/B<=X | comm:A<=X, evaluated in every
non-weak section holding the runs: tokens = tokens/s ratio, state = weight+grad+optimizer
bytes ratio; comm:A = A's exposed comm share of the step. Prints MET / NOT
MET lines; the exit status stays 0 (a table, not a test).
"""
import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mirror import flop_per_token  # noqa: E402

BYTES_PER_PARAM = 16  # f32 master + f32 main grad + Adam m, v (f32)


def median(xs):
    s = sorted(xs)
    return s[len(s) // 2] if s else float("nan")


def fmt_bytes(b):
    if b is None:
        return "—"
    return f"{b / 2**30:.2f} GiB" if b >= 2**30 else f"{b / 2**20:.1f} MiB"


def read_gtp(path, log, global_batch, seq, skip):
    by_step = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                r = json.loads(line)
                if "loss" in r:
                    by_step[r["step"]] = r
    if not by_step:
        raise ValueError(f"no step lines in {path}")
    recs = [by_step[s] for s in sorted(by_step)]
    steady = recs[skip:] or recs
    ms = median([r["ms"] for r in steady])
    comm = median([r.get("comm_exposed_ms", 0.0) for r in steady])
    params = None
    if log and os.path.exists(log):
        with open(log, errors="replace") as f:
            m = re.search(r"\(([0-9.]+)M on this rank\)", f.read())
        if m:
            params = float(m.group(1)) * 1e6
    return {"median_ms": ms, "tokens_per_s": global_batch * seq / (ms / 1e3),
            "peak_mem_bytes": max(r.get("peak_mem_bytes", 0) for r in recs),
            "in_use_bytes": recs[-1].get("mem_bytes"),
            "state_bytes": None if params is None else params * BYTES_PER_PARAM, "state_est": True,
            "comm_ms": comm, "comm_frac": comm / ms if ms else float("nan")}


def read_torch(path):
    with open(path) as f:
        lines = [l for l in f.read().splitlines() if l.strip()]
    r = json.loads(lines[-1])
    return {"median_ms": r["median_ms"], "tokens_per_s": r["tokens_per_s"],
            "peak_mem_bytes": r.get("peak_mem_bytes"), "in_use_bytes": None,
            "state_bytes": r.get("state_bytes"), "state_est": False, "comm_ms": None, "comm_frac": None}


def load(tsv, skip):
    sections = {}
    with open(tsv) as f:
        for line in f:
            if not line.strip():
                continue
            c = line.rstrip("\n").split("\t")
            if len(c) != 12:
                raise SystemExit(f"dist_table: expected 12 columns, got {len(c)}: {line!r}")
            sec, kind, label, gpus, gb, L, C, V, T, path, log, note = c
            row = {"label": label, "kind": kind, "gpus": int(gpus), "global_batch": int(gb),
                   "shape": (int(V), int(T), int(L), int(C)), "note": note}
            if kind in ("gtp", "torch"):
                try:
                    row.update(read_gtp(path, log, int(gb), int(T), skip) if kind == "gtp" else read_torch(path))
                except (OSError, ValueError, KeyError, IndexError) as e:
                    row["kind"], row["note"] = "skip", (note + "; " if note else "") + f"no result ({e})"
            sections.setdefault(sec, []).append(row)
    return sections


def check(spec, rows):
    m = re.fullmatch(r"(tokens|state|comm):([^/<>=]+)(?:/([^<>=]+))?(>=|<=)([0-9.eE+-]+)", spec)
    if not m:
        raise SystemExit(f"dist_table: bad --check {spec!r}")
    kind, a, b, op, x = m.group(1), m.group(2), m.group(3), m.group(4), float(m.group(5))
    by = {r["label"]: r for r in rows if r["kind"] != "skip"}
    if a not in by or (b is not None and b not in by):
        return None
    if kind == "comm":
        v = by[a]["comm_frac"]
        what = f"{a} exposed comm {100 * v:.1f}% of the step" if v is not None else None
    else:
        key = "tokens_per_s" if kind == "tokens" else "state_bytes"
        if b is None or by[a].get(key) is None or by[b].get(key) is None:
            return None
        v = by[a][key] / by[b][key]
        what = f"{a} / {b} {'tokens/s' if kind == 'tokens' else 'weight+grad+optimizer bytes'} {v:.3f}x"
    if v is None:
        return None
    ok = v >= x if op == ">=" else v <= x
    return f"{'MET' if ok else 'NOT MET'}: {what} (target {op} {x:g})"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs")
    ap.add_argument("--ref", default="", help="label whose tokens/s the ratio column divides by "
                    "(absent or skipped: the section's first run)")
    ap.add_argument("--skip", type=int, default=10)
    ap.add_argument("--peak_tflops", type=float, default=989.0)
    ap.add_argument("--check", action="append", default=[])
    ap.add_argument("--weak_target", type=float, default=0.0,
                    help="> 0: a MET / NOT MET line for each weak section's largest run's efficiency")
    a = ap.parse_args(argv)
    for sec, rows in load(a.runs, a.skip).items():
        shape = rows[0]["shape"]
        fpt = flop_per_token(*shape)
        V, T, L, C = shape
        print(f"\n### {sec}: L={L} C={C} V={V} T={T}; {fpt:.4e} FLOP/token; MFU per GPU vs "
              f"{a.peak_tflops:g} TFLOP/s; median over steps > {a.skip}")
        weak = sec.startswith("weak")
        ran = [r for r in rows if r["kind"] != "skip"]
        ref = next((r for r in ran if r["label"] == a.ref), ran[0] if ran else None)
        base = min((r for r in rows if r["kind"] != "skip"), key=lambda r: r["gpus"], default=None)
        extra = " weak-scaling eff. |" if weak else ""
        print(f"| run | GPUs | global batch | ms/step | tokens/s | tokens/s/GPU | MFU | peak mem/GPU "
              f"| weight+grad+optim/GPU | in use/GPU | exposed comm | vs {ref['label'] if ref else '—'} |{extra}")
        print("|---" * (13 if weak else 12) + "|")
        for r in rows:
            if r["kind"] == "skip":
                print(f"| {r['label']} | {r['gpus']} | {r['global_batch']} | SKIP: {r['note']} |" + " |" * (9 if weak else 8))
                continue
            per_gpu = r["tokens_per_s"] / r["gpus"]
            mfu = fpt * per_gpu / (a.peak_tflops * 1e12)
            state = fmt_bytes(r["state_bytes"]) + (" (est.)" if r["state_est"] and r["state_bytes"] else "")
            comm = "—" if r["comm_ms"] is None else f"{r['comm_ms']:.2f} ms ({100 * r['comm_frac']:.1f}%)"
            ratio = f"{r['tokens_per_s'] / ref['tokens_per_s']:.3f}" if ref else "—"
            cells = [r["label"] + (f" ({r['note']})" if r["note"] else ""), str(r["gpus"]), str(r["global_batch"]),
                     f"{r['median_ms']:.2f}", f"{r['tokens_per_s']:.0f}", f"{per_gpu:.0f}", f"{100 * mfu:.1f}%",
                     fmt_bytes(r["peak_mem_bytes"]), state, fmt_bytes(r["in_use_bytes"]), comm, ratio]
            if weak:
                cells.append(f"{100 * per_gpu / (base['tokens_per_s'] / base['gpus']):.1f}%")
            print("| " + " | ".join(cells) + " |")
        if weak and a.weak_target > 0 and len(ran) > 1:
            top = max(ran, key=lambda r: r["gpus"])
            eff = (top["tokens_per_s"] / top["gpus"]) / (base["tokens_per_s"] / base["gpus"])
            print(f"{'MET' if eff >= a.weak_target else 'NOT MET'}: weak scaling {base['gpus']} → {top['gpus']} GPUs "
                  f"efficiency {100 * eff:.1f}% (target >= {100 * a.weak_target:g}%)")
        for spec in [] if weak else a.check:
            line = check(spec, rows)
            if line:
                print(line)


if __name__ == "__main__":
    main()
