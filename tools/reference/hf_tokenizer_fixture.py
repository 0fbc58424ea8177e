"""Writes an independent byte-level BPE fixture with Hugging Face `tokenizers`.

Trains a small byte-level BPE (GPT-2 pre-tokenizer, no prefix space) on the
repository's text files, saves vocab.json + merges.txt, and writes the ids
HF gives for every line of data/tokenizer/testdata/hf_text.txt (one line of
space-separated ids per input line). //data/tokenizer:hf_fixture_test checks
that gtp's tokenizer gives the same ids.

  python3 tools/reference/hf_tokenizer_fixture.py --out DIR
"""
import argparse
import glob
import os

import tokenizers

ap = argparse.ArgumentParser()
ap.add_argument("--out", required=True)
a = ap.parse_args()
files = sorted(glob.glob("**/*.md", recursive=True)) + ["data/tokenizer/testdata/hf_text.txt"]
files = [f for f in files if not f.startswith("bazel-") and not f.startswith(".bundle")]
tok = tokenizers.ByteLevelBPETokenizer(add_prefix_space=False)
tok.train(files, vocab_size=2000, min_frequency=2, show_progress=False)
os.makedirs(a.out, exist_ok=True)
tok.save_model(a.out, "hf")
with open("data/tokenizer/testdata/hf_text.txt", encoding="utf-8") as f, \
     open(os.path.join(a.out, "hf_ids.txt"), "w") as out:
    for line in f.read().split("\n"):
        out.write(" ".join(str(i) for i in tok.encode(line).ids) + "\n")
print("tokenizers", tokenizers.__version__, "vocab", tok.get_vocab_size(), "files", len(files))
