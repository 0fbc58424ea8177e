#!/usr/bin/env python3
"""Side-by-side table of a gtp run and PyTorch runs on the same model and data.

The reporting half of tools/bench/bench.sh (stdlib only):

  python3 tools/bench/compare.py --gtp RUN/metrics.jsonl --torch eager.json \\
      --torch compile.json --vocab 50257 --seq_len 1024 --n_layer 12 --n_embd 768

reads gtp's metrics.jsonl (one JSON line per step: loss, ms, tokens_per_s,
peak_mem_bytes; evaluation lines are ignored) and the summary JSON of each
tools/bench/torch_gpt.py run, and prints

  run | median ms/step | tokens/s | MFU | peak mem | vs torch-compile

(median over the steps after --skip; MFU by mirror.flop_per_token, per GPU,
against --peak_tflops; the last column is torch-compile's ms ÷ the run's ms,
> 1: faster), the per-step losses side by side, and loss agreement of each
pair over steps --agree_from..N: mean |Δ|, max |Δ| and the final loss's
relative difference. With --layer_pattern (a hybrid Mamba-2 stack) the
model line names the pattern and MFU is "—": mirror's FLOP count is the dense
GPT-2 one.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mirror import flop_per_token  # noqa: E402


def median(xs):
    s = sorted(xs)
    return s[len(s) // 2] if s else float("nan")


def read_gtp(path, name, skip):
    by_step = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            r = json.loads(line)
            if "loss" in r:
                by_step[r["step"]] = r  # a resumed run's later line wins
    if not by_step:
        raise SystemExit(f"compare: no step lines in {path}")
    steps = sorted(by_step)
    recs = [by_step[s] for s in steps]
    ms = [r["ms"] for r in recs]
    med = median(ms[skip:] or ms)
    tokens_per_step = recs[0]["tokens_per_s"] * recs[0]["ms"] / 1e3
    return {"run": name, "median_ms": med, "tokens_per_s": tokens_per_step / (med / 1e3),
            "peak_mem_bytes": max(r.get("peak_mem_bytes", 0) for r in recs),
            "losses": [r["loss"] for r in recs], "grad_norms": [r.get("grad_norm", 0.0) for r in recs],
            "lrs": [r.get("lr", 0.0) for r in recs]}


def read_torch(path):
    with open(path) as f:
        lines = [l for l in f.read().splitlines() if l.strip()]
    return json.loads(lines[-1])


def fmt_bytes(b):
    return f"{b / 2**30:.2f} GiB" if b >= 2**30 else f"{b / 2**20:.1f} MiB"


def agreement(a, b, start):
    """Mean |Δ|, max |Δ| (and its 1-based step) over steps start..N, final rel diff."""
    n = min(len(a.get("losses", [])), len(b.get("losses", [])))
    if n == 0:
        return None
    lo = min(max(start, 1), n) - 1
    d = [abs(a["losses"][i] - b["losses"][i]) for i in range(lo, n)]
    imax = max(range(len(d)), key=d.__getitem__)
    fa, fb = a["losses"][n - 1], b["losses"][n - 1]
    out = {"from": lo + 1, "to": n, "mean": sum(d) / len(d), "max": d[imax], "max_step": lo + 1 + imax,
           "final_rel": abs(fa - fb) / abs(fb) if fb else float("nan")}
    # Mirror checks over every step: the lr schedule and the grad norm.
    rel = lambda x, y: abs(x - y) / abs(y) if y else abs(x - y)  # noqa: E731
    if a.get("lrs") and b.get("lrs"):
        out["lr_rel"] = max(rel(a["lrs"][i], b["lrs"][i]) for i in range(n))
    if a.get("grad_norms") and b.get("grad_norms"):
        out["norm_rel"] = sum(rel(a["grad_norms"][i], b["grad_norms"][i]) for i in range(lo, n)) / (n - lo)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gtp", required=True, help="gtp's metrics.jsonl")
    ap.add_argument("--gtp_name", default="gtp")
    ap.add_argument("--torch", action="append", default=[], help="torch_gpt.py JSON (repeatable; missing files are skipped)")
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--seq_len", type=int, default=1024)
    ap.add_argument("--n_layer", type=int, default=12)
    ap.add_argument("--n_embd", type=int, default=768)
    ap.add_argument("--world", type=int, default=1, help="gtp's GPUs (MFU is per GPU)")
    ap.add_argument("--peak_tflops", type=float, default=989.0)
    ap.add_argument("--skip", type=int, default=10)
    ap.add_argument("--agree_from", type=int, default=21)
    ap.add_argument("--layer_pattern", default="", help="gtp's hybrid layer pattern (no MFU)")
    ap.add_argument("--losses", choices=["all", "none"], default="all", help="print the per-step losses")
    a = ap.parse_args(argv)

    fpt = flop_per_token(a.vocab, a.seq_len, a.n_layer, a.n_embd)
    g = read_gtp(a.gtp, a.gtp_name, a.skip)
    g["mfu"] = None if a.layer_pattern else fpt * g["tokens_per_s"] / a.world / (a.peak_tflops * 1e12)
    runs = [g]
    for p in a.torch:
        try:
            runs.append(read_torch(p))
        except (OSError, ValueError, IndexError) as e:
            print(f"compare: skipping {p}: {e}", file=sys.stderr)
    ref = next((r for r in runs if r["run"] == "torch-compile"), None) or (runs[1] if len(runs) > 1 else None)

    if a.layer_pattern:
        print(f"model: hybrid \"{a.layer_pattern}\" L={a.n_layer} C={a.n_embd} V={a.vocab} T={a.seq_len}; "
              f"no MFU (the dense FLOP count does not fit); median over steps > {a.skip}")
    else:
        print(f"model: L={a.n_layer} C={a.n_embd} V={a.vocab} T={a.seq_len}; {fpt:.4e} FLOP/token; "
              f"MFU per GPU vs {a.peak_tflops:g} TFLOP/s; median over steps > {a.skip}")
    ref_col = f"vs {ref['run']} (ms ratio)" if ref else "ratio"
    print(f"| run | median ms/step | tokens/s | MFU | peak mem | {ref_col} |")
    print("|---|---|---|---|---|---|")
    for r in runs:
        ratio = f"{ref['median_ms'] / r['median_ms']:.3f}" if ref else "—"
        mfu = "—" if r.get("mfu") is None else f"{100 * r['mfu']:.1f}%"
        print(f"| {r['run']} | {r['median_ms']:.2f} | {r['tokens_per_s']:.0f} | {mfu} | "
              f"{fmt_bytes(r['peak_mem_bytes'])} | {ratio} |")
    for r in runs[1:]:
        print(f"{g['run']} / {r['run']}: {r['median_ms'] / g['median_ms']:.3f}x the throughput "
              f"({g['median_ms']:.2f} vs {r['median_ms']:.2f} ms/step)")

    if a.losses == "all":
        print("\nper-step loss")
        print("step  " + "  ".join(f"{r['run']:>14s}" for r in runs))
        n = max(len(r.get("losses", [])) for r in runs)
        for i in range(n):
            cells = [f"{r['losses'][i]:14.6f}" if i < len(r.get("losses", [])) else f"{'':14s}" for r in runs]
            print(f"{i + 1:4d}  " + "  ".join(cells))

    print(f"\nloss agreement (steps {a.agree_from}..N)")
    pairs = [(g, r) for r in runs[1:]]
    if len(runs) > 2:
        pairs.append((runs[1], runs[2]))
    for x, y in pairs:
        s = agreement(x, y, a.agree_from)
        if s is None:
            continue
        print(f"{x['run']} vs {y['run']}: steps {s['from']}..{s['to']}: mean |Δ| {s['mean']:.4g}, "
              f"max |Δ| {s['max']:.4g} (step {s['max_step']}), final loss rel diff {s['final_rel']:.3g}"
              + (f"; grad-norm mean rel diff {s['norm_rel']:.3g}" if "norm_rel" in s else "")
              + (f"; lr max rel diff {s['lr_rel']:.2g}" if "lr_rel" in s else ""))


if __name__ == "__main__":
    main()
