"""Trains the same byte-level BPE with Hugging Face `tokenizers` (BpeTrainer,
ByteLevel pre-tokenizer without prefix space, the full 256-byte alphabet,
<|endoftext|>) and with gtp's tools/data:train_bpe, and compares merges.txt.

Both take the most frequent pair and break ties by the smaller (left id,
right id) with the byte tokens in byte→unicode order (data/tokenizer/
bpe_trainer.h), so the merges should be identical line for line. vocab.json
differs only in where the special token sits (HF: id 0, gtp/GPT-2: last).
Each file is one text (train_bpe pre-tokenizes files whole).

  bazel build //tools/data:train_bpe
  python3 tools/reference/hf_bpe_trainer_check.py --vocab_size 4096 README.md DESIGN.md ...
"""
import argparse
import os
import subprocess
import sys
import tempfile

import tokenizers
from tokenizers import models, pre_tokenizers, trainers

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
ap = argparse.ArgumentParser()
ap.add_argument("--train_bpe", default=os.path.join(ROOT, "bazel-bin", "tools", "data", "train_bpe"))
ap.add_argument("--vocab_size", type=int, default=4096)
ap.add_argument("files", nargs="+")
a = ap.parse_args()

out = tempfile.mkdtemp()
subprocess.run([a.train_bpe, "--input=" + ",".join(os.path.abspath(f) for f in a.files),
                f"--vocab_size={a.vocab_size}", f"--out_dir={out}/gtp"], check=True)

tok = tokenizers.Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
trainer = trainers.BpeTrainer(vocab_size=a.vocab_size, min_frequency=0, show_progress=False,
                              special_tokens=["<|endoftext|>"],
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
texts = [open(f, "rb").read().decode("utf-8") for f in a.files]
tok.train_from_iterator(texts, trainer)
os.makedirs(f"{out}/hf")
tok.model.save(f"{out}/hf")

ours = open(f"{out}/gtp/merges.txt", encoding="utf-8").read().split("\n")
theirs = open(f"{out}/hf/merges.txt", encoding="utf-8").read().split("\n")
for i, (x, y) in enumerate(zip(ours, theirs)):
    if x != y:
        print(f"merges.txt line {i + 1}: gtp {x!r}, HF {y!r}")
        sys.exit(1)
if len(ours) != len(theirs):
    print(f"gtp has {len(ours)} lines, HF {len(theirs)}")
    sys.exit(1)
print(f"tokenizers {tokenizers.__version__}: {len(ours) - 2} merges, identical to train_bpe's")
