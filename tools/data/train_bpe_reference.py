#!/usr/bin/env python3
"""The BPE training of data/tokenizer/bpe_trainer.h, written the slow, obvious
way (stdlib only): every merge recounts every pair of every word. For checking
train_bpe's incremental bookkeeping (train_bpe_test.sh).

  train_bpe_reference.py TEXT VOCAB_SIZE OUT_DIR   # writes vocab.json, merges.txt

TEXT must be ASCII: GPT-2's split regex needs \\p{L}/\\p{N}, which Python's
`re` lacks; on ASCII they are [A-Za-z] / [0-9] and \\s is [ \\t\\n\\r\\f\\v].
"""
import collections
import json
import re
import sys

SPLIT = re.compile(
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+""", re.ASCII)


def bytes_to_unicode():
    """GPT-2's encoder.py: the byte alphabet, in vocabulary order."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return bs, [chr(c) for c in cs]


def train(text, vocab_size, specials=("<|endoftext|>",)):
    order, chars = bytes_to_unicode()
    spell_of_byte = dict(zip(order, chars))
    tokens = [bytes([b]) for b in order]  # id -> bytes
    id_of = {t: i for i, t in enumerate(tokens)}
    counts = collections.Counter(SPLIT.findall(text))
    words = [([id_of[bytes([b])] for b in w.encode()], c) for w, c in counts.items()]
    merges = []
    while len(tokens) + len(specials) < vocab_size:
        pairs = collections.Counter()
        for syms, c in words:
            for p in zip(syms, syms[1:]):
                pairs[p] += c
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))  # most frequent, then smallest ids
        new = tokens[best[0]] + tokens[best[1]]
        if new not in id_of:
            id_of[new] = len(tokens)
            tokens.append(new)
        nid = id_of[new]
        merges.append((tokens[best[0]], tokens[best[1]]))
        for syms, _ in words:
            out, i = [], 0
            while i < len(syms):
                if i + 1 < len(syms) and (syms[i], syms[i + 1]) == best:
                    out.append(nid)
                    i += 2
                else:
                    out.append(syms[i])
                    i += 1
            syms[:] = out
    spell = lambda bs: "".join(spell_of_byte[b] for b in bs)
    vocab = {spell(t): i for i, t in enumerate(tokens)}
    for s in specials:
        vocab[s] = len(vocab)
    merges_txt = "#version: 0.2\n" + "".join(f"{spell(a)} {spell(b)}\n" for a, b in merges)
    return json.dumps(vocab, ensure_ascii=False, separators=(",", ":")), merges_txt


def main():
    text_path, vocab_size, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    text = open(text_path, "rb").read().decode("ascii")
    vocab_json, merges_txt = train(text, vocab_size)
    with open(f"{out}/vocab.json", "w", encoding="utf-8", newline="") as f:
        f.write(vocab_json)
    with open(f"{out}/merges.txt", "w", encoding="utf-8", newline="") as f:
        f.write(merges_txt)
    print(f"reference: {merges_txt.count(chr(10)) - 1} merges")


if __name__ == "__main__":
    main()
