#!/usr/bin/env python3
"""Plots a gtp run's metrics.jsonl with matplotlib: training loss with the
validation loss, the learning rate, and tokens/s against the step.

  python3 tools/plot_metrics/plot.py gtp_runs/gpt_tiny/metrics.jsonl loss.png
  python3 tools/plot_metrics/plot.py RUN/metrics.jsonl out.png --smooth 0.9 --title "gpt_tiny"

--smooth W draws an exponential moving average (weight W in [0, 1), bias
corrected as TensorBoard's slider does) over the raw curve, which stays
faint behind it; 0 (the default) draws the raw values only. A step logged
twice (a run resumed behind its last log line) keeps its last value; NaN/Inf
losses (skipped steps) are left out. For live curves use TensorBoard
(train.tensorboard_dir); the dependency-free PNG renderer is
//tools/plot_metrics (plot_metrics.cc).

Exit codes: 0 written; 1 unreadable or empty metrics, unwritable output;
2 usage, or matplotlib is not installed.
"""

import argparse
import json
import math
import re
import sys

# The trainer prints a non-finite float as C does (nan, -nan, inf), which
# JSON lacks; Python's json reads NaN and Infinity.
_NON_FINITE = re.compile(r"(?<=: )-?(nan|inf)\b")


def _json_non_finite(m):
    return "NaN" if m.group(1) == "nan" else m.group(0).replace("inf", "Infinity")


def load(path):
    """{key: [(step, value), ...] sorted by step} of the numeric fields."""
    series = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            line = _NON_FINITE.sub(_json_non_finite, line)
            try:
                rec = json.loads(line)
            except ValueError as e:
                raise ValueError("%s:%d: not JSON: %s" % (path, n, e))
            step = rec.get("step")
            if not isinstance(step, int):
                continue
            for key, v in rec.items():
                if key == "step" or isinstance(v, bool) or not isinstance(v, (int, float)):
                    continue
                if math.isfinite(v):
                    series.setdefault(key, {})[step] = float(v)
    return {k: sorted(d.items()) for k, d in series.items()}


def ema(values, weight):
    """Debiased exponential moving average (TensorBoard's smoothing)."""
    out, last = [], 0.0
    for i, v in enumerate(values):
        last = last * weight + (1 - weight) * v
        out.append(last / (1 - weight ** (i + 1)) if weight > 0 else v)
    return out


def main(argv):
    p = argparse.ArgumentParser(description="Plot a gtp metrics.jsonl (matplotlib).")
    p.add_argument("metrics", help="the run's metrics.jsonl")
    p.add_argument("out", help="output image (.png, .svg, .pdf: by extension)")
    p.add_argument("--smooth", type=float, default=0.0, help="EMA weight in [0, 1); 0: raw")
    p.add_argument("--title", default=None, help="figure title (default: the metrics path)")
    args = p.parse_args(argv[1:])
    if not 0 <= args.smooth < 1:
        p.error("--smooth must be in [0, 1)")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot.py: matplotlib is not installed (pip install matplotlib, or apt-get install "
              "python3-matplotlib); without it: bazel run //tools/plot_metrics -- METRICS OUT.png",
              file=sys.stderr)
        return 2
    try:
        s = load(args.metrics)
    except (OSError, ValueError) as e:
        print("plot.py: %s" % e, file=sys.stderr)
        return 1
    if not s.get("loss"):
        print("plot.py: no loss records in %s" % args.metrics, file=sys.stderr)
        return 1

    fig, (ax_loss, ax_lr, ax_tput) = plt.subplots(
        3, 1, sharex=True, figsize=(9, 9), gridspec_kw={"height_ratios": [2, 1, 1]})
    fig.suptitle(args.title or args.metrics)

    def curve(ax, key, label, color):
        if not s.get(key):
            return
        x, y = zip(*s[key])
        if args.smooth > 0:
            ax.plot(x, y, color=color, alpha=0.25, linewidth=1)
            ax.plot(x, ema(y, args.smooth), color=color, linewidth=1.5,
                    label="%s (EMA %.2f)" % (label, args.smooth))
        else:
            ax.plot(x, y, color=color, linewidth=1.5, label=label)

    curve(ax_loss, "loss", "train", "tab:blue")
    if s.get("val_loss"):
        x, y = zip(*s["val_loss"])
        ax_loss.plot(x, y, "o-", color="tab:red", markersize=4, label="validation")
    ax_loss.set_ylabel("loss (nats/token)")
    ax_loss.legend()
    ax_loss.grid(alpha=0.3)
    curve(ax_lr, "lr", "lr", "tab:purple")
    ax_lr.set_ylabel("learning rate")
    ax_lr.ticklabel_format(axis="y", style="sci", scilimits=(0, 0))
    ax_lr.grid(alpha=0.3)
    curve(ax_tput, "tokens_per_s", "tokens/s", "tab:green")
    ax_tput.set_ylabel("tokens/s")
    ax_tput.set_xlabel("step")
    ax_tput.grid(alpha=0.3)
    fig.tight_layout()
    try:
        fig.savefig(args.out, dpi=120)
    except (OSError, ValueError) as e:
        print("plot.py: cannot write %s: %s" % (args.out, e), file=sys.stderr)
        return 1
    last_step, last_loss = s["loss"][-1]
    print("wrote %s (%d steps, last loss %.4f at step %d)" % (args.out, len(s["loss"]), last_loss, last_step))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
