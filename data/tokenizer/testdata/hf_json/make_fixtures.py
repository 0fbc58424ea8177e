#!/usr/bin/env python3
"""Writes the tokenizer.json fixtures of data/tokenizer/testdata/hf_json/.

    python3 data/tokenizer/testdata/hf_json/make_fixtures.py [--qwen3 PATH/tokenizer.json]

Hand-made files (vocabularies small enough to derive ids by hand; the
pipelines are the real files' stanzas, see README.md):
  llama3_style.json    Split(Llama-3 regex) + ByteLevel, ignore_merges, pair merges
  qwen2_style.json     NFC + Split(Qwen2 regex) + ByteLevel, "a b" merges, lstrip/rstrip
  llama2_style.json    Prepend/Replace normalizer, byte_fallback, unk, Strip decoder
  metaspace_style.json Metaspace(prepend_scheme first) pre-tokenizer, byte_fallback,
                       the Llama/Mistral decoder (transformers' legacy=False shape)
  gpt2_hf.json         testdata/hf/vocab.json + merges.txt (trained by HF tokenizers)
                       as a GPT-2 tokenizer.json
With --qwen3: qwen3_2k.json, Qwen3's tokenizer.json (Apache-2.0) cut to its
first 2000 merges, the byte tokens and the tokens those merges make (ids kept).
"""
import argparse
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
TESTDATA = os.path.dirname(HERE)

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = LLAMA3_REGEX.replace(r"\p{N}{1,3}", r"\p{N}")


def bytes_to_unicode():
    """GPT-2's byte -> character map, in GPT-2's id order."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [(b, chr(c)) for b, c in zip(bs, cs)]


def byte_level_vocab():
    """The 256 byte tokens with GPT-2's ids ('!' 0, 'Ġ' (space) 220, 'Ċ' (LF) 198)."""
    return {ch: i for i, (_, ch) in enumerate(bytes_to_unicode())}


def added(id_, content, special=True, normalized=False, lstrip=False, rstrip=False):
    return {"id": id_, "content": content, "single_word": False, "lstrip": lstrip,
            "rstrip": rstrip, "normalized": normalized, "special": special}


def bpe(vocab, merges, **kw):
    model = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
             "ignore_merges": False, "vocab": vocab, "merges": merges}
    model.update(kw)
    return model


def tokenizer(model, added_tokens, normalizer, pre_tokenizer, decoder, post_processor=None):
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added_tokens,
            "normalizer": normalizer, "pre_tokenizer": pre_tokenizer,
            "post_processor": post_processor, "decoder": decoder, "model": model}


def with_merges(vocab, merges):
    """Gives each merge's result the next id, in merge order."""
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    return vocab


def byte_level(add_prefix_space=False, use_regex=False):
    return {"type": "ByteLevel", "add_prefix_space": add_prefix_space, "trim_offsets": True,
            "use_regex": use_regex}


def llama3_style():
    merges = [["Ġ", "h"], ["e", "l"], ["l", "o"], ["Ġh", "el"], ["Ġhel", "lo"],  # 256..260
              ["1", "2"], ["12", "3"], ["'", "S"], ["Ċ", "Ċ"], ["h", "el"],      # 261..265
              ["hel", "lo"]]                                                     # 266
    vocab = with_merges(byte_level_vocab(), merges)
    vocab["Ġworld"] = 267  # reachable only through ignore_merges
    vocab["(hello"] = 268  # likewise
    return tokenizer(
        bpe(vocab, merges, ignore_merges=True),
        [added(269, "<|begin_of_text|>"), added(270, "<|end_of_text|>")],
        None,
        {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3_REGEX}, "behavior": "Isolated",
             "invert": False},
            byte_level()]},
        byte_level(add_prefix_space=True, use_regex=True),
        post_processor={"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                        "use_regex": True})


def qwen2_style():
    merges = [["Ã", "©"], ["c", "a"], ["ca", "f"], ["caf", "Ã©"], ["Ġ", "a"]]  # 256..260
    vocab = with_merges(byte_level_vocab(), merges)
    return tokenizer(
        bpe(vocab, [a + " " + b for a, b in merges]),
        [added(261, "<|endoftext|>"), added(262, "<|im_start|>"), added(263, "<|im_end|>"),
         added(264, "<tool_call>", special=False),
         added(265, "<L>", special=False, lstrip=True),
         added(266, "<R>", special=False, rstrip=True)],
        {"type": "NFC"},
        {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_REGEX}, "behavior": "Isolated",
             "invert": False},
            byte_level()]},
        byte_level())


def sentencepiece_vocab():
    """<unk> <s> </s>, the 256 <0xNN> tokens (3..258), then pieces from 259."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = 3 + b
    for piece in ["▁", "h", "e", "l", "o", "w", "r", "d"]:  # 259..266
        vocab[piece] = len(vocab)
    merges = [["▁", "h"], ["e", "l"], ["▁h", "el"], ["l", "o"], ["▁hel", "lo"],  # 267..271
              ["▁", "w"], ["o", "r"], ["▁w", "or"], ["▁wor", "l"], ["▁worl", "d"],  # 272..276
              ["▁", "▁"]]  # 277
    return with_merges(vocab, merges), merges


SP_ADDED = [added(0, "<unk>"), added(1, "<s>"), added(2, "</s>")]
# transformers' LlamaConverter decoder (with and without legacy).
SP_DECODER = {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
    {"type": "ByteFallback"}, {"type": "Fuse"},
    {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}


def llama2_style():
    vocab, merges = sentencepiece_vocab()
    return tokenizer(
        bpe(vocab, [a + " " + b for a, b in merges], unk_token="<unk>", fuse_unk=True,
            byte_fallback=True),
        SP_ADDED,
        {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
        None,
        SP_DECODER,
        post_processor={"type": "TemplateProcessing",
                        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                   {"Sequence": {"id": "A", "type_id": 0}}],
                        "pair": [], "special_tokens": {}})


def metaspace_style():
    vocab, merges = sentencepiece_vocab()
    return tokenizer(
        bpe(vocab, merges, unk_token="<unk>", byte_fallback=True),
        SP_ADDED, None,
        {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False},
        SP_DECODER)


def gpt2_hf():
    with open(os.path.join(TESTDATA, "hf", "vocab.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    with open(os.path.join(TESTDATA, "hf", "merges.txt"), encoding="utf-8") as f:
        merges = [l.rstrip("\n") for l in f if l.strip() and not l.startswith("#version")]
    return tokenizer(bpe(vocab, merges), [], None, byte_level(use_regex=True), byte_level())


def qwen3_cut(path, n):
    with open(path, encoding="utf-8") as f:
        t = json.load(f)
    model = t["model"]
    keep = set(ch for _, ch in bytes_to_unicode())
    merges = model["merges"][:n]
    for a, b in merges:
        keep.add(a + b)
    model["vocab"] = {k: v for k, v in model["vocab"].items() if k in keep}
    model["merges"] = merges
    renumber_added(t)
    return t


def renumber_added(t):
    """Gives the added tokens the ids Hugging Face's tokenizers gives them on
    loading (in file order: a vocab token keeps its id, any other takes the
    vocab size or the largest added id so far + 1): cut to 2k tokens, Qwen3's
    file keeps ids 151643… that the Rust library renumbers (and gtp refuses)."""
    vocab, count, top, old_to_new = t["model"]["vocab"], len(t["model"]["vocab"]), -1, {}
    for a in t["added_tokens"]:
        if a["content"] in vocab:
            new = vocab[a["content"]]
        else:
            new = count if top < 0 or (top < count and count > 0) else top + 1
        old_to_new[a["id"]] = new
        a["id"] = new
        top = max(top, new)
    for tmpl in (t.get("post_processor") or {}).get("special_tokens", {}).values():
        tmpl["ids"] = [old_to_new.get(i, i) for i in tmpl.get("ids", [])]
    return old_to_new


def write(name, obj, indent=1):
    with open(os.path.join(HERE, name), "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=indent)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qwen3", help="Qwen3's tokenizer.json, to write qwen3_2k.json")
    a = ap.parse_args()
    write("llama3_style.json", llama3_style())
    write("qwen2_style.json", qwen2_style())
    write("llama2_style.json", llama2_style())
    write("metaspace_style.json", metaspace_style())
    write("gpt2_hf.json", gpt2_hf(), indent=None)
    if a.qwen3:
        write("qwen3_2k.json", qwen3_cut(a.qwen3, 2000), indent=None)


if __name__ == "__main__":
    main()
