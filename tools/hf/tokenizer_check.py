#!/usr/bin/env python3
"""gtp's tokenizers against Hugging Face's Rust `tokenizers` and `transformers`
(GPU machine: both are installed there, not here).

For every tokenizer.json fixture in data/tokenizer/testdata/hf_json, each line
of its text.txt is encoded by
  - gtp:          the bundled //data/tokenizer:tokenize --tokenizer_json
  - Rust:         tokenizers.Tokenizer.from_file(json).encode(line, add_special_tokens=False)
  - transformers: PreTrainedTokenizerFast(tokenizer_file=json).encode(line, add_special_tokens=False)
and the three id lists must be equal (the CPU suite already holds gtp equal to
HF's JS implementation on the same lines: hf_json_test). Where gtp can decode
(--decode), Rust's decode of gtp's ids must equal gtp's.

SentencePiece .model files are checked by //data/tokenizer's tests against
the ids the sentencepiece library gave (tools/hf/spm_fixture.py).

  python3 tools/hf/tokenizer_check.py --tokenize /tmp/gtp_bundle/bin/data_tokenizer_tokenize
Prints one line per fixture and exits 1 on any difference.
"""
import argparse
import glob
import os
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def gtp_ids(tokenize, flag, path, lines):
    out = subprocess.run([tokenize, f"{flag}={path}"], input="\n".join(lines) + "\n",
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"tokenize {flag}={path}: exit {out.returncode}: {out.stderr.strip()}")
    rows = out.stdout.split("\n")[: len(lines)]
    return [[int(t) for t in r.split()] for r in rows]


def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenize", required=True, help="gtp's tokenize binary")
    ap.add_argument("--fixtures", default=os.path.join(ROOT, "data/tokenizer/testdata/hf_json"))
    a = ap.parse_args()

    import tokenizers
    import transformers
    print(f"tokenizers {tokenizers.__version__}, transformers {transformers.__version__}")
    lines = open(os.path.join(a.fixtures, "text.txt"), encoding="utf-8").read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    bad = 0
    for path in sorted(glob.glob(os.path.join(a.fixtures, "*.json"))):
        name = os.path.basename(path)[:-5]
        rust = tokenizers.Tokenizer.from_file(path)
        fast = transformers.PreTrainedTokenizerFast(tokenizer_file=path)
        mine = gtp_ids(a.tokenize, "--tokenizer_json", path, lines)
        diffs = []
        for i, line in enumerate(lines):
            r = rust.encode(line, add_special_tokens=False).ids
            t = fast.encode(line, add_special_tokens=False)
            if not (mine[i] == r == t):
                diffs.append((i, line, mine[i], r, t))
        n_ids = sum(len(x) for x in mine)
        if diffs:
            bad += 1
            print(f"FAIL {name}: {len(diffs)} of {len(lines)} lines differ")
            for i, line, m, r, t in diffs[:3]:
                k = first_diff(m, r)
                print(f"  line {i + 1} {line[:60]!r}: gtp {m[:12]}… rust {r[:12]}… transformers {t[:12]}… (first difference at {k})")
        else:
            print(f"PASS {name}: {len(lines)} lines, {n_ids} ids: gtp == tokenizers == transformers")
    print("tokenizer_check:", "FAIL" if bad else "PASS")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
