#!/usr/bin/env python3
"""Where the GPU time of a training step goes, by kernel: runs a bundled
trainer under Nsight Compute (one duration metric per kernel, CUDA graphs off)
and sums the kernels by name per optimizer step.

    (GPU machine, repo root, bundle unpacked as tools/gpu.sh run does)
    python3 tools/bench/kernel_profile.py --bin /tmp/gb/bin --steps 6 \\
        --set model.layer_pattern=M*-M*-M*-M*-M*-M*-,model.n_layer=18 [--top 30]

The run is recipes/gpt_124m's recipe (B=8, T=1024, bf16) with the extra
--set. A step ends at its last launch of the optimizer kernel (AdamW), which
runs once per parameter group a step (twice in an MoE model: the dense and
the expert parameters), so the launches must split evenly into --steps steps
(the run's own count: keep it when re-reading with --from_csv); the first
--skip_steps steps (cuBLASLt's heuristics, first-touch allocation) are not
counted, and a counted step without a GEMM is refused (a wrong --steps). Prints share, ms per step and launches per step for each kernel
name, largest first; writes the raw CSV to --csv when given. Kernel time
only: host gaps and overlap are not in it (bench.sh measures the step).

Then the same time by part (PARTS below: GEMMs, attention, fp8 quantisers,
bias gradients, MoE routing, optimizer, norms, ...; a kernel goes to the
first part whose pattern its name matches, else "other"). --gemm_speedup
S [S ...] adds, for each S, the step's kernel time if the GEMM part alone ran
S times faster and the ratio old/new: an upper bound on what faster GEMMs
(e.g. fp8 against this bf16 step) can give, the rest unchanged.
--from_csv reads a CSV that --csv wrote instead of running ncu (on any
machine: the tables again, other --skip_steps or speed-ups, no GPU).
"""
import argparse
import collections
import csv
import io
import os
import re
import subprocess
import sys

UNIT = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0,
        "second": 1e3, "s": 1e3}


# (part, pattern searched in the short kernel name), first match wins: the
# bias-gradient kernels before the fp8 namespace (the fp8 path's bias sums),
# the gradient norm before the norms. By name only: "embedding" also holds
# a MoE layer's row gathers and their backward (its dispatchers run the
# embedding kernels), "elementwise" its casts and adds.
PARTS = [
    ("GEMMs", r"nvjet|xmma|[Gg]emm|cutlass|gemv"),
    ("attention", r"cudnn|fmha|[Ff]lash|matmul_dq|dot_do_o|Attention|sdpa"),
    ("bias gradients", r"Column(Slab|Total|Partial|Finish)|AddColumnPartials|[Bb]grad"),
    ("fp8 quantisers", r"fp8::|Quantiz|Dequantiz"),
    ("MoE routing", r"moe::"),
    ("optimizer", r"AdamW|Muon|NewtonSchulz"),
    ("grad norm", r"GradNorm|SumSquares"),
    ("norms", r"Norm"),
    ("loss", r"CrossEntropy|Loss"),
    ("embedding", r"Embedding|SegmentAdd|SortKeys|[Rr]adix|Onesweep"),
    ("elementwise", r"Axpby|Cast|Fill|Gelu|SwiGlu|Copy|Widen|Rope|Softmax|Philox|Add"),
]


def part_of(name):
    for part, pattern in PARTS:
        if re.search(pattern, name):
            return part
    return "other"


def short(name):
    for anon in ("(anonymous namespace)::", "<unnamed>::"):
        name = name.replace(anon, "")
    name = re.sub(r"\(.*", "", name)  # drop argument lists
    name = re.sub(r"<[^<>]*>", "", re.sub(r"<[^<>]*>", "", name))  # template arguments
    return name.replace("void ", "").strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="/tmp/gb/bin")
    ap.add_argument("--set", default="")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--skip_steps", type=int, default=2)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--csv", default="")
    ap.add_argument("--ncu", default="ncu")
    ap.add_argument("--from_csv", default="",
                    help="read this CSV (written by --csv) instead of running ncu")
    ap.add_argument("--gemm_speedup", type=float, nargs="*", default=[],
                    help="also print the step's kernel time with the GEMM part this many "
                         "times faster (each > 0), and old/new")
    ap.add_argument("--launches", type=float, default=-1.0,
                    help="also list the last counted step's launches in order (duration, grid "
                         "size, name) of at least this many microseconds")
    args = ap.parse_args()
    if args.steps < 1 or args.skip_steps < 0 or args.skip_steps >= args.steps or args.top < 1:
        ap.error(f"need --steps >= 1, 0 <= --skip_steps < --steps and --top >= 1; got --steps "
                 f"{args.steps}, --skip_steps {args.skip_steps}, --top {args.top}")
    if any(not (x > 0 and x < float("inf")) for x in args.gemm_speedup):
        ap.error(f"--gemm_speedup needs finite values > 0 (e.g. 1.5 2); got {args.gemm_speedup}")
    if args.from_csv:
        try:
            with open(args.from_csv) as f:
                text = f.read()
        except OSError as err:
            sys.exit(f"kernel_profile: cannot read --from_csv {args.from_csv}: {err}")
        if '"ID"' not in text:
            sys.exit(f"kernel_profile: {args.from_csv} has no ncu CSV header (\"ID\", ...)")
        report(args, text[text.find('"ID"'):])
        return
    run_dir = "/tmp/kernel_profile_run"
    base = ("model.vocab_size=50257,model.seq_len=1024,train.micro_batch=8,train.global_batch=8,"
            "train.precision=bf16,train.device=cuda,train.cuda_graphs=off,train.eval_every=0,"
            "checkpoint.every=0,checkpoint.no_resume=true,data.source=corpus,"
            f"train.steps={args.steps},train.log_every=1")
    sets = base + ("," + args.set if args.set else "")
    cmd = [args.ncu, "--clock-control", "none", "--metrics",
           "gpu__time_duration.sum,launch__grid_size", "--csv",
           os.path.join(args.bin, "recipes_gpt_124m_train"), "--config",
           "recipes/gpt_124m/gpt_124m.pbtxt", "--noprogress", "--run_dir", run_dir, "--set", sets]
    print("kernel_profile:", " ".join(cmd), flush=True)
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.stderr.write(out.stdout[-4000:] + out.stderr[-4000:])
        sys.exit(f"kernel_profile: ncu exited {out.returncode}")
    text = out.stdout[out.stdout.find('"ID"'):]
    if args.csv:
        with open(args.csv, "w") as f:
            f.write(text)
    report(args, text)


def report(args, text):
    """The tables of one ncu CSV (--csv's contents)."""
    all_rows = list(csv.DictReader(io.StringIO(text)))
    rows = [r for r in all_rows if r.get("Metric Name") == "gpu__time_duration.sum"]
    grid = {r["ID"]: r["Metric Value"] for r in all_rows if r.get("Metric Name") == "launch__grid_size"}
    if not rows:
        sys.exit("kernel_profile: no kernel rows in ncu's output")
    # Step boundaries: each step's last optimizer launch (one a parameter group).
    opt = [i for i, r in enumerate(rows) if "AdamW" in r["Kernel Name"]]
    if not opt or len(opt) % args.steps:
        sys.exit(f"kernel_profile: {len(opt)} optimizer launches do not split evenly into "
                 f"--steps {args.steps} steps; pass the run's --steps")
    per_step = len(opt) // args.steps
    launches = f"{per_step} optimizer launch{'es' if per_step > 1 else ''} a step"
    ends = opt[per_step - 1::per_step]
    first = ends[args.skip_steps - 1] + 1 if args.skip_steps > 0 else 0
    last = ends[-1]
    steps = args.steps - args.skip_steps
    for s in range(args.skip_steps, args.steps):
        begin = ends[s - 1] + 1 if s > 0 else 0
        if not any(part_of(short(r["Kernel Name"])) == "GEMMs" for r in rows[begin:ends[s] + 1]):
            sys.exit(f"kernel_profile: step {s + 1} of --steps {args.steps} ({launches}) has no "
                     f"GEMM; pass the run's --steps")
    ms = collections.defaultdict(float)
    n = collections.Counter()
    for r in rows[first:last + 1]:
        k = short(r["Kernel Name"])
        v = float(r["Metric Value"].replace(",", "")) * UNIT[r["Metric Unit"]]
        ms[k] += v
        n[k] += 1
    total = sum(ms.values())
    print(f"kernel_profile: {steps} steps counted, {total / steps:.3f} ms of kernel time per step, "
          f"{sum(n.values()) / steps:.0f} launches per step ({launches})")
    print("| share | ms/step | launches/step | kernel |")
    print("|---|---|---|---|")
    for k, v in sorted(ms.items(), key=lambda kv: -kv[1])[:args.top]:
        print(f"| {100 * v / total:.1f} % | {v / steps:.3f} | {n[k] / steps:.0f} | `{k[:90]}` |")
    parts = collections.defaultdict(float)
    pn = collections.Counter()
    for k, v in ms.items():
        parts[part_of(k)] += v
        pn[part_of(k)] += n[k]
    print(f"kernel_profile: by part (ms per step; {total / steps:.3f} in all)")
    print("| part | ms/step | share | launches/step |")
    print("|---|---|---|---|")
    for p, v in sorted(parts.items(), key=lambda kv: -kv[1]):
        print(f"| {p} | {v / steps:.3f} | {100 * v / total:.1f} % | {pn[p] / steps:.0f} |")
    g = parts.get("GEMMs", 0.0)
    for x in args.gemm_speedup:
        new = total - g + g / x
        print(f"kernel_profile: GEMMs {x:g}x faster: {new / steps:.3f} ms of kernel time per "
              f"step, old/new {total / new:.3f}x (the GEMMs {g / steps:.3f} ms now, the rest "
              f"{(total - g) / steps:.3f} unchanged)")
    if args.launches >= 0:
        begin = ends[-2] + 1 if len(ends) >= 2 else 0
        print(f"kernel_profile: the last step's launches of >= {args.launches} us, in order")
        print("| # | us | grid | kernel |")
        print("|---|---|---|---|")
        for i, r in enumerate(rows[begin:last + 1]):
            us = 1e3 * float(r["Metric Value"].replace(",", "")) * UNIT[r["Metric Unit"]]
            if us >= args.launches:
                print(f"| {i} | {us:.1f} | {grid.get(r['ID'], '?')} | `{short(r['Kernel Name'])[:100]}` |")


if __name__ == "__main__":
    main()
