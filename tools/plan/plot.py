#!/usr/bin/env python3
"""Plot `plan scale` CSV output: tokens/s per GPU and memory per GPU against GPUs, one line per family.

    bazel run //tools/plan -- scale --recipe ... --cluster ... > weak.csv
    python3 tools/plan/plot.py weak.csv weak.png [--title "70B on H200, weak scaling"]

Reads the columns CsvHeader() writes (plan/report.h): label, world, tokens_per_s_per_gpu,
memory_gb, fits. Rows with an empty step_s (nothing fits) are skipped. Needs matplotlib.
"""
import argparse
import csv
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("png")
    ap.add_argument("--title", default="")
    a = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot.py needs matplotlib (pip install matplotlib); the CSV itself has every number")
    series = {}
    with open(a.csv) as f:
        for row in csv.DictReader(f):
            if not row.get("step_s"):
                continue
            s = series.setdefault(row["label"], ([], [], []))
            s[0].append(int(row["world"]))
            s[1].append(float(row["tokens_per_s_per_gpu"]))
            s[2].append(float(row["memory_gb"]))
    if not series:
        sys.exit(f"{a.csv}: no rows with a prediction")
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for label, (w, tps, mem) in sorted(series.items()):
        ax1.plot(w, tps, marker="o", label=label)
        ax2.plot(w, mem, marker="o", label=label)
    for ax, ylabel in ((ax1, "tokens/s per GPU"), (ax2, "memory per GPU (GB)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("GPUs")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.suptitle((a.title + " — " if a.title else "") + "predicted by tools/plan (see the CSV's calibrated column)")
    fig.tight_layout()
    fig.savefig(a.png, dpi=120)
    print(f"wrote {a.png}")


if __name__ == "__main__":
    main()
