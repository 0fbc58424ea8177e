#!/usr/bin/env python3
"""PASS/FAIL/SKIP table of tools/bench/nccl_parity.sh's cells (stdlib only).

  python3 tools/bench/parity.py CELLS.tsv
  python3 tools/bench/parity.py --noise REF.jsonl OTHER.jsonl   -> "max mean" rel Δloss

CELLS.tsv has one tab-separated line per cell:

  label  ranks  precision  status  ref_metrics  run_metrics  tol  mean_tol  note

status "pass": a PASS row whose note says what passed (a check that is no
loss comparison, e.g. rank death). status "ran": the cell's every step loss is compared with the reference's
(same step numbers, both metrics.jsonl of the trainer; evaluation lines are
ignored): PASS when every step's |Δ| / |ref| <= tol and the mean of those
over the steps <= mean_tol ("-": no mean bound), and both runs have the
same steps. status "skip" / "error": a SKIP / FAIL row with the note as its
reason. Prints the markdown table and a summary line; exits 1 when a row
FAILed, 0 otherwise (SKIPs do not fail).
"""
import json
import sys


def losses(path):
    out = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            r = json.loads(line)
            if "loss" in r:
                out[r["step"]] = r["loss"]  # a resumed run's later line wins
    return out


def compare(ref_path, run_path, tol, mean_tol):
    """(ok, steps, max rel, mean rel, worst step, why)."""
    try:
        ref, run = losses(ref_path), losses(run_path)
    except (OSError, ValueError) as e:
        return False, 0, None, None, None, f"unreadable metrics: {e}"
    if not ref or not run:
        return False, 0, None, None, None, "no step lines in " + (run_path if ref else ref_path)
    if sorted(ref) != sorted(run):
        return False, len(run), None, None, None, f"steps differ: ref {len(ref)}, run {len(run)}"
    rel = {s: abs(run[s] - ref[s]) / abs(ref[s]) if ref[s] else abs(run[s]) for s in ref}
    worst = max(rel, key=rel.get)
    mx, mean = rel[worst], sum(rel.values()) / len(rel)
    ok = mx <= tol and (mean_tol is None or mean <= mean_tol)
    why = "" if ok else (f"step {worst}: {run[worst]:.6f} vs {ref[worst]:.6f}" if mx > tol
                         else f"mean rel {mean:.2e} > {mean_tol:g}")
    return ok, len(rel), mx, mean, worst, why


def main(argv):
    if len(argv) == 4 and argv[1] == "--noise":
        ok, _, mx, mean, _, why = compare(argv[2], argv[3], float("inf"), None)
        if mx is None:
            raise SystemExit(f"parity --noise: {why}")
        print(f"{mx:.3e} {mean:.3e}")
        return 0
    if len(argv) != 2:
        raise SystemExit("usage: parity.py CELLS.tsv")
    rows, fails, passes, skips = [], 0, 0, 0
    with open(argv[1]) as f:
        for line in f:
            if not line.strip():
                continue
            cols = line.rstrip("\n").split("\t")
            if len(cols) != 9:
                raise SystemExit(f"parity: expected 9 columns, got {len(cols)}: {line!r}")
            label, ranks, prec, status, ref, run, tol, mean_tol, note = cols
            tol_s = tol if mean_tol == "-" else f"{tol} (mean {mean_tol})"
            if status == "skip":
                skips += 1
                rows.append((label, ranks, prec, "—", "—", "—", tol_s, "SKIP", note))
                continue
            if status == "pass":
                passes += 1
                rows.append((label, ranks, prec, "—", "—", "—", tol_s, "PASS", note))
                continue
            if status != "ran":
                fails += 1
                rows.append((label, ranks, prec, "—", "—", "—", tol_s, "FAIL", note))
                continue
            ok, n, mx, mean, _, why = compare(ref, run, float(tol), None if mean_tol == "-" else float(mean_tol))
            fails += not ok
            passes += ok
            rows.append((label, ranks, prec, str(n), "—" if mx is None else f"{mx:.2e}",
                         "—" if mean is None else f"{mean:.2e}", tol_s, "PASS" if ok else "FAIL",
                         "; ".join(x for x in (note, why) if x)))
    print("| layout | ranks | precision | steps | max rel Δloss | mean rel Δloss | tolerance | result | note |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    print(f"\nparity: {passes} PASS, {fails} FAIL, {skips} SKIP")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
