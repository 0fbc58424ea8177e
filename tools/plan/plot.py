#!/usr/bin/env python3
"""Plot `plan scale` (or `plan predict --csv`) output: tokens/s per GPU and memory per GPU against GPUs, a line per label.

    bazel run //tools/plan -- scale --recipe ... --cluster ... > weak.csv
    python3 tools/plan/plot.py weak.csv weak.png [--title "70B on H200, weak scaling"]

Reads the columns CsvHeader() writes (plan/report.h): label (the family for `scale`, the
recipe's name for `predict`), world, step_s, tokens_per_s_per_gpu, memory_gb, fits, calibrated.
Rows with an empty step_s (nothing fits or divides) are left out; rows with fits = 0 (a
`predict` layout over the memory cap) are left out and named on stderr. The title says whether
the kernel times were calibrated (every row's `calibrated` column), so a plot cannot pass an
uncalibrated prediction off as a calibrated one. Both y axes start at 0.

Needs matplotlib: on Debian/Ubuntu `apt-get install -y python3-matplotlib` and run it with
/usr/bin/python3 (a pyenv or venv python3 does not see Debian's packages); or
`pip install matplotlib` into the python3 you use.
"""
import argparse
import csv
import sys


def calibration_note(flags):
    if flags and all(f == "1" for f in flags):
        return "calibrated kernel times"
    if not any(f == "1" for f in flags):
        return "UNCALIBRATED kernel times (default curve)"
    return "partly calibrated kernel times (see the CSV's calibrated column)"


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
        from matplotlib.ticker import FixedLocator, NullLocator
    except ImportError:
        sys.exit("plot.py needs matplotlib (Debian/Ubuntu: apt-get install -y python3-matplotlib, then "
                 "/usr/bin/python3 tools/plan/plot.py ...); the CSV itself has every number")
    series, flags, left_out = {}, [], []
    with open(a.csv) as f:
        for row in csv.DictReader(f):
            if not row.get("step_s"):
                continue
            if row.get("fits") == "0":
                left_out.append(f"{row['label']}@{row['world']}")
                continue
            s = series.setdefault(row["label"], [])
            s.append((int(row["world"]), float(row["tokens_per_s_per_gpu"]), float(row["memory_gb"])))
            flags.append(row.get("calibrated", ""))
    if left_out:
        print(f"plot.py: left out (over the memory cap, fits = 0): {' '.join(left_out)}", file=sys.stderr)
    if not series:
        sys.exit(f"{a.csv}: no rows with a prediction that fits")
    worlds = sorted({w for pts in series.values() for w, _, _ in pts})
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    for label, pts in sorted(series.items()):
        pts.sort()
        w = [p[0] for p in pts]
        ax1.plot(w, [p[1] for p in pts], marker="o", label=label)
        ax2.plot(w, [p[2] for p in pts], marker="o", label=label)
    top = {i: 1.1 * max(p[i] for pts in series.values() for p in pts) for i in (1, 2)}
    for ax, i, ylabel in ((ax1, 1, "tokens/s per GPU"), (ax2, 2, "memory per GPU (GB)")):
        ax.set_xscale("log", base=2)
        # Every GPU count of the CSV as a plain number (log ticks would read 2^5, 2^7, ...).
        ax.xaxis.set_major_locator(FixedLocator(worlds))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticklabels([str(w) for w in worlds], rotation=45 if len(worlds) > 7 else 0)
        ax.set_xlabel("GPUs")
        ax.set_ylabel(ylabel)
        ax.set_ylim(0, top[i])
        ax.grid(True, alpha=0.3)
        ax.legend(loc="lower left")
    fig.suptitle((a.title + "\n" if a.title else "") + "predicted by tools/plan, " + calibration_note(flags), fontsize=11)
    fig.tight_layout()
    fig.savefig(a.png, dpi=100)
    print(f"wrote {a.png}")


if __name__ == "__main__":
    main()
