#!/usr/bin/env python3
"""Runs the shell commands of a Markdown file, as a newcomer would (issue 30).

Every fenced ```sh block is executed line by line (a trailing backslash
continues a line; `#` starts a comment), in order, in one scratch directory
that stands for the directory the reader runs from. A block whose preceding
line is `<!-- docs-test: skip (reason) -->` is left out, with the reason
printed.

The commands are translated, never rewritten by hand:
  bazel run [-c opt] //pkg[:name] [-- ARGS]  ->  the built binary with ARGS, started
      the way `bazel run` starts it (in its runfiles tree, with
      BUILD_WORKING_DIRECTORY set to the scratch directory);
  $PWD/bazel-bin/PATH                        ->  the built binary PATH;
  $PWD                                       ->  the scratch directory;
  tools/setup.sh, bazel build, bazel test    ->  skipped (the test's own build did that);
  python3 SCRIPT ...                         ->  run from the repository tree.
The documented step counts are replaced by small ones, as the doc says: a
recipe trainer (vlm_mimo too) gets `--set train.steps=STEPS` appended (the
last --set wins).

  CMD > FILE                                 ->  standard output into FILE (scratch directory).

Usage: run_docs.py [--steps N] [--target //pkg:name=PATH ...] FILE.md...
Exits 1 when a command fails or names a target the test was not given.
"""
import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time


def blocks(text):
    """(first line number, lines) of each ```sh block not marked skip; prints skips."""
    lines = text.splitlines()
    out, i = [], 0
    while i < len(lines):
        if lines[i].strip() == "```sh":
            j = i + 1
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            prev = next((lines[k].strip() for k in range(i - 1, -1, -1) if lines[k].strip()), "")
            m = re.match(r"<!-- docs-test: skip \((.*)\) -->", prev)
            if m:
                print(f"SKIP block at line {i + 1}: {m.group(1)}")
            else:
                out.append((i + 2, lines[i + 1:j]))
            i = j
        i += 1
    return out


def commands(first, lines):
    """(line number, command text) with continuations joined."""
    out, cur, start = [], "", None
    for n, line in enumerate(lines, first):
        if start is None:
            start = n
        if line.rstrip().endswith("\\"):
            cur += line.rstrip()[:-1] + " "
            continue
        cur += line
        if cur.strip():
            out.append((start, cur.strip()))
        cur, start = "", None
    return out


def split_and(tokens):
    parts, cur = [], []
    for t in tokens:
        if t == "&&":
            parts.append(cur)
            cur = []
        else:
            cur.append(t)
    parts.append(cur)
    return [p for p in parts if p]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--target", action="append", default=[], help="//pkg:name=PATH")
    ap.add_argument("docs", nargs="+", help="Markdown files, run in order in one scratch directory")
    a = ap.parse_args()
    root = os.getcwd()
    targets = {}
    for t in a.target:
        label, path = t.split("=", 1)
        targets[label] = os.path.join(root, path)
    work = tempfile.mkdtemp(prefix="docs_", dir=os.environ.get("TEST_TMPDIR"))
    env = dict(os.environ, BUILD_WORKING_DIRECTORY=work)
    ran = failed = 0
    for doc in a.docs:
        r, f = run_doc(doc, a, root, targets, work, env)
        ran += r
        failed += f
    print(f"{len(a.docs)} files: {ran} commands run, {failed} failed")
    return 1 if failed or ran == 0 else 0


def run_doc(doc, a, root, targets, work, env):
    a.doc = doc
    text = open(doc, encoding="utf-8").read()
    ran = failed = 0
    for first, lines in blocks(text):
        for line_no, cmd in commands(first, lines):
            tokens = shlex.split(cmd, comments=True)
            for part in split_and(tokens):
                where = f"{a.doc}:{line_no}"
                if part[0] in ("tools/setup.sh", "./tools/setup.sh"):
                    print(f"skip  {where}: {' '.join(part)} (the test machine is set up)")
                    continue
                argv = None
                if part[0] == "bazel":
                    verb = part[1] if len(part) > 1 else ""
                    if verb in ("build", "test"):
                        print(f"skip  {where}: bazel {verb} (done by the test's own build)")
                        continue
                    if verb != "run":
                        print(f"FAIL  {where}: unknown bazel command {' '.join(part)}")
                        failed += 1
                        continue
                    rest = part[2:]
                    while rest and rest[0].startswith("-"):
                        rest = rest[2:] if rest[0] == "-c" else rest[1:]
                    label = rest[0]
                    if ":" not in label:
                        label = label + ":" + label.rsplit("/", 1)[-1]
                    if label not in targets:
                        print(f"FAIL  {where}: {label} is not among the docs test's targets (add it to tools/docs/BUILD)")
                        failed += 1
                        continue
                    args = rest[1:]
                    if args and args[0] == "--":
                        args = args[1:]
                    argv = [targets[label]] + args
                elif part[0] == "python3":
                    argv = part
                else:
                    print(f"FAIL  {where}: no translation for '{part[0]}'")
                    failed += 1
                    continue
                for k, v in enumerate(argv):
                    v = v.replace("$PWD/bazel-bin/", root + "/").replace("$PWD", work)
                    argv[k] = v
                # `> FILE`: standard output into FILE (relative: the scratch directory).
                out_file = None
                if ">" in argv:
                    k = argv.index(">")
                    out_file = os.path.join(work, argv[k + 1])
                    argv = argv[:k] + argv[k + 2:]
                # Small step counts where the documented run is long.
                binary = os.path.relpath(argv[0], root) if argv[0].startswith(root) else ""
                for k, v in enumerate(argv):
                    if v.startswith(root + "/recipes/") and v.endswith("/train"):
                        binary = os.path.relpath(v, root)
                if re.fullmatch(r"recipes/[a-z0-9_]+/train", binary):
                    argv += ["--set", f"train.steps={a.steps}"]
                if part[0] == "python3" and len(part) > 1 and part[1].endswith("plot.py"):
                    probe = subprocess.run(["python3", "-c", "import matplotlib"], capture_output=True)
                    if probe.returncode != 0:
                        print(f"skip  {where}: {' '.join(part)} (matplotlib is not installed here)")
                        continue
                t0 = time.time()
                cwd = root if part[0] == "bazel" else work
                # (A byte-level model's samples need not be UTF-8.)
                if out_file:
                    with open(out_file, "wb") as f:
                        r = subprocess.run(argv, cwd=cwd, env=env, stdout=f, stderr=subprocess.PIPE, timeout=900)
                    r.stdout = r.stderr.decode("utf-8", "replace") + f"(stdout written to {out_file})"
                else:
                    r = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                       encoding="utf-8", errors="replace", timeout=900)
                last = [l for l in r.stdout.splitlines() if l.strip()][-1:] or [""]
                ran += 1
                if r.returncode != 0:
                    failed += 1
                    print(f"FAIL  {where}: {cmd}\n      rc {r.returncode}; as run: {' '.join(argv)}\n"
                          + "\n".join("      | " + l for l in r.stdout.splitlines()[-15:]))
                else:
                    print(f"ok    {where} ({time.time() - t0:.1f} s): {cmd[:110]}\n      -> {last[0][:140]}")
    print(f"{a.doc}: {ran} commands run, {failed} failed")
    return ran, failed


if __name__ == "__main__":
    sys.exit(main())
