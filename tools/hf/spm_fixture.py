"""Writes SentencePiece `tokenizer.model` fixtures and the ids the reference gives.

Trains small SentencePiece models (BPE and Unigram, Llama-2 style: identity
normalization, a dummy prefix, spaces kept, byte fallback, digits split; and
variants) on data/tokenizer/testdata/spm/train.txt, then writes into OUTDIR:

  NAME.model      the serialized sentencepiece.ModelProto
  expected.json   per model: its options, bos/eos/unk/pad ids, and for every
                  test string the ids, pieces and decode of the `sentencepiece`
                  library; decodes of hand-picked id sequences (control ids,
                  unk, byte pieces that are not UTF-8)

//data/tokenizer:sentencepiece_tokenizer_test reads them from
data/tokenizer/testdata/spm/ (it skips those cases while they are absent).
Where `transformers` is installed, each model is also loaded with
LlamaTokenizer (slow: sentencepiece itself) and LlamaTokenizerFast (converted
to a tokenizers BPE/Unigram; in transformers 5 the converted one only), and
with AutoTokenizer from a directory laid out as `ckpt export --format hf`
writes it (tokenizer.model + its tokenizer_config.json); the strings whose
ids differ from sentencepiece's are printed and recorded in expected.json
under "hf_differences" (HF's differences, not a failure of this script).

  python3 tools/hf/spm_fixture.py OUTDIR
  cp OUTDIR/* data/tokenizer/testdata/spm/

Needs: sentencepiece (training and reference ids); optional: transformers
with tokenizers (the comparison). Deterministic: one training thread, a fixed
corpus, fixed test strings.
"""
import json
import os
import random
import sys

import sentencepiece as spm

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(ROOT, "data", "tokenizer", "testdata", "spm", "train.txt")

# Llama-2's trainer settings, scaled down (its tokenizer.model's trainer_spec).
LLAMA = dict(
    normalization_rule_name="identity",
    add_dummy_prefix=True,
    remove_extra_whitespaces=False,
    byte_fallback=True,
    split_digits=True,
    allow_whitespace_only_pieces=True,
    max_sentencepiece_length=16,
    character_coverage=0.9995,
    unk_id=0,
    bos_id=1,
    eos_id=2,
    pad_id=-1,
)

MODELS = {
    # The shape of Llama-2 / Mistral 7B's tokenizer.model.
    "bpe": dict(LLAMA, model_type="bpe", vocab_size=800),
    # The same as a Unigram model.
    "unigram": dict(LLAMA, model_type="unigram", vocab_size=700),
    # No byte fallback (unknown characters become <unk>, runs of them one
    # <unk>), whitespace runs collapsed, a user-defined symbol, a pad piece.
    "bpe_nofallback": dict(
        model_type="bpe",
        vocab_size=500,
        normalization_rule_name="identity",
        add_dummy_prefix=True,
        remove_extra_whitespaces=True,
        byte_fallback=False,
        character_coverage=0.98,
        user_defined_symbols=["<mask>", "[SEP]"],
        pad_id=3,
        unk_id=0,
        bos_id=1,
        eos_id=2,
    ),
    # No dummy prefix.
    "bpe_noprefix": dict(LLAMA, model_type="bpe", vocab_size=600, add_dummy_prefix=False),
    # Unicode NFKC rules (a precompiled_charsmap), SentencePiece's default
    # normalizer: gtp refuses it by name unless it implements the charsmap.
    "unigram_nfkc": dict(
        model_type="unigram",
        vocab_size=700,
        normalization_rule_name="nmt_nfkc",
        byte_fallback=True,
        character_coverage=0.9995,
    ),
}

FIXED = [
    "",
    " ",
    "   ",
    "Hello world",
    "Hello world!",
    " leading space",
    "  two leading spaces",
    "trailing space ",
    "double  space and   triple",
    "tab\there and\t\ttwo tabs",
    "line one\nline two\n\nafter an empty line",
    "windows\r\nline end",
    "Grüße aus München, schöne Straße",
    "Über Äpfel, Öfen und Übungen",
    "你好，世界！我们正在训练模型。",
    "日本語のテキストとカタカナ",
    "한국어 문장은 학습 데이터에 없다",
    "Привет, мир! Москва — столица.",
    "Ελληνικά γράμματα και ελληνικές λέξεις",
    "عربى مكتوب من اليمين",
    "emoji 🤖🎉 👍🏽 and 🍕☕",
    "👨‍👩‍👧 family and 🇩🇪 flag",
    "def f(x):\n\treturn x  # comment",
    "for (int i = 0;  i < n;  ++i)  sum  +=  a[i];",
    "numbers 3 42 1024 65536 and 3.14159",
    "2024-01-15 12:30:45",
    "<s> and </s> and <unk> typed as text",
    "<0x41> typed as text",
    "<mask> user [SEP] symbols<mask>",
    "\u2581 a lower one eighth block",
    "\u2581\u2581 two of them",
    "no\u00a0break\u00a0space",
    "ℌ𝔢𝔩𝔩𝔬 ①②③ ﬁ ligature",
    "Ｆｕｌｌｗｉｄｔｈ ｔｅｘｔ",
    "e\u0301 combining vs \u00e9 precomposed",
    "\u200bzero\u200bwidth",
    "rare ☃ ⚛ ♞ ∮ ∯ symbols",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "the the the the the the",
    "x",
    "\t",
    "\n",
    "ends with newline\n",
]


def random_lines(corpus, n, seed):
    """Lines spliced from the corpus's characters and words, and some that
    are not there (rare code points), so every path of the encoder is hit."""
    rng = random.Random(seed)
    words = corpus.split()
    chars = sorted(set(corpus))
    extra = ["\u00e0", "\u0416", "\u4e00", "\u0905", "\U0001F600", "\u2603", "\t", "  ", " ",
             "\u2581", "\U00010348", "\u0301", "\ufeff"]
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 12)):
            r = rng.random()
            if r < 0.6:
                parts.append(rng.choice(words))
            elif r < 0.8:
                parts.append("".join(rng.choice(chars) for _ in range(rng.randint(1, 5))))
            else:
                parts.append(rng.choice(extra))
            parts.append(rng.choice([" ", " ", " ", "", "  ", "\t", "\n"]))
        out.append("".join(parts))
    return out


def decode_cases(sp):
    """Id sequences whose decode is checked beside the encodes' round trips."""
    n = sp.get_piece_size()
    cases = []
    hello = sp.encode("Hello world")
    if sp.bos_id() >= 0 and sp.eos_id() >= 0:
        cases.append([sp.bos_id()] + hello + [sp.eos_id()])
        cases.append(hello + [sp.eos_id()] + sp.encode("again"))
    cases.append([sp.unk_id()])
    cases.append(hello + [sp.unk_id(), sp.unk_id()] + hello)
    byte = {}
    for i in range(n):
        p = sp.id_to_piece(i)
        if sp.is_byte(i):
            byte[int(p[3:5], 16)] = i
    if byte:
        cases.append([byte[0xE4], byte[0xBD], byte[0xA0]])        # 你 in bytes
        cases.append([byte[0xE4], byte[0xBD]])                    # truncated
        cases.append([byte[0xE4], byte[0xBD]] + hello)            # truncated, then text
        cases.append([byte[0x80], byte[0x41], byte[0xFF]])        # stray bytes
        cases.append([byte[0x20], byte[0x41]])                    # a space byte first
        cases.append(hello + [byte[0x0A]] + hello)
    # A piece starting with U+2581 first, then second.
    sp_word = [i for i in range(n) if sp.id_to_piece(i).startswith("\u2581") and
               not sp.is_control(i) and not sp.is_unknown(i)]
    if sp_word:
        cases.append([sp_word[0], sp_word[0]])
        if sp.bos_id() >= 0:
            cases.append([sp.bos_id(), sp_word[0]])
    return [{"ids": ids, "text": sp.decode(ids)} for ids in cases]


# What `ckpt export --format hf` writes beside a run's tokenizer.model
# (tools/ckpt/ckpt.cc, WriteHfTokenizer), less model_max_length.
EXPORT_CONFIG = {"tokenizer_class": "LlamaTokenizer", "add_bos_token": False,
                 "add_eos_token": False, "legacy": True, "sp_model_kwargs": {},
                 "clean_up_tokenization_spaces": False}


def hf_loaders(model_path, sp):
    """(name, tokenizer) for every way this transformers loads a .model."""
    import shutil
    import tempfile
    import transformers
    major = int(transformers.__version__.split(".")[0])
    specials = {"unk_token": sp.id_to_piece(sp.unk_id())}
    for key, i in (("bos_token", sp.bos_id()), ("eos_token", sp.eos_id()), ("pad_token", sp.pad_id())):
        if i >= 0:
            specials[key] = sp.id_to_piece(i)
    d = tempfile.mkdtemp()
    shutil.copy(model_path, os.path.join(d, "tokenizer.model"))
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(dict(EXPORT_CONFIG, **specials), f)
    with open(os.path.join(d, "special_tokens_map.json"), "w") as f:
        json.dump(specials, f)
    makers = [("AutoTokenizer on gtp's export", lambda: transformers.AutoTokenizer.from_pretrained(d))]
    kw = dict(legacy=True, add_bos_token=False, add_eos_token=False)
    if major >= 5:
        makers.append(("LlamaTokenizer(vocab=.model)",
                       lambda: transformers.LlamaTokenizer(vocab=model_path, **kw)))
    else:
        makers.append(("LlamaTokenizer(vocab_file=.model)",
                       lambda: transformers.LlamaTokenizer(vocab_file=model_path, **kw)))
        makers.append(("LlamaTokenizerFast(from_slow)",
                       lambda: transformers.LlamaTokenizerFast(vocab_file=model_path, from_slow=True, **kw)))
    for name, make in makers:
        try:
            yield name, make(), None
        except Exception as e:  # noqa: BLE001 - report whatever HF raises
            yield name, None, f"cannot load: {type(e).__name__}: {e}"


def hf_compare(model_path, sp, texts, ref):
    """Ids and decodes of transformers' Llama tokenizers from the same .model vs `ref`."""
    try:
        import transformers
    except ImportError as e:
        return {"skipped": f"transformers not importable: {e}"}
    result = {"transformers": transformers.__version__}
    for name, tok, err in hf_loaders(model_path, sp):
        if err:
            result[name] = err
            print(f"  {name}: {err}")
            continue
        n = len(tok)
        diffs, decode_diffs = [], 0
        for text, ids in zip(texts, ref):
            try:
                got = tok.encode(text, add_special_tokens=False)
                back = tok.decode(ids)
            except Exception as e:  # noqa: BLE001
                got, back = f"{type(e).__name__}: {e}", None
            if got != ids:
                diffs.append({"text": text, "sentencepiece": ids, "hf": got})
            decode_diffs += back != sp.decode(ids)
        result[name] = {"tokens": n, "differences": len(diffs), "decode_differences": decode_diffs,
                        "of": len(texts), "first": diffs[:10]}
        print(f"  {name}: {n} tokens (the model has {sp.get_piece_size()}); {len(diffs)} of "
              f"{len(texts)} strings encode differently from sentencepiece, {decode_diffs} decode "
              f"differently")
        for d in diffs[:3]:
            print(f"    {d['text']!r}\n      spm {d['sentencepiece']}\n      hf  {d['hf']}")
    return result


def compact_json(o, indent=0):
    """JSON with one test case per line (lists of scalars and flat objects inline)."""
    pad = " " * indent

    def nested(v):
        return isinstance(v, dict) or (isinstance(v, list) and v and isinstance(v[0], dict))
    if isinstance(o, dict) and any(nested(v) for v in o.values()):
        items = [f'{pad} {json.dumps(k)}: {compact_json(v, indent + 1).lstrip()}' for k, v in o.items()]
        return pad + "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(o, list) and o and isinstance(o[0], dict):
        return pad + "[\n" + ",\n".join(compact_json(v, indent + 1) for v in o) + "\n" + pad + "]"
    return pad + json.dumps(o, ensure_ascii=False)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    corpus = open(CORPUS, encoding="utf-8").read()
    texts = FIXED + corpus.split("\n")[:40] + random_lines(corpus, 150, seed=30)
    expected = {"sentencepiece": spm.__version__, "corpus": "data/tokenizer/testdata/spm/train.txt",
                "models": {}}
    for name, opts in MODELS.items():
        prefix = os.path.join(out, name)
        args = dict(input=CORPUS, model_prefix=prefix, num_threads=1, hard_vocab_limit=False,
                    **opts)
        try:
            spm.SentencePieceTrainer.train(minloglevel=2, **args)  # quiet where it can be
        except Exception:  # noqa: BLE001 - an older sentencepiece without the flag
            spm.SentencePieceTrainer.train(**args)
        os.remove(prefix + ".vocab")
        sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
        cases = []
        for t in texts:
            ids = sp.encode(t)
            cases.append({"text": t, "ids": ids, "pieces": sp.encode(t, out_type=str),
                          "decoded": sp.decode(ids)})
        print(f"{name}: {sp.get_piece_size()} pieces, {len(cases)} strings, "
              f"{sum(len(c['ids']) for c in cases)} ids")
        m = {
            "file": name + ".model",
            "options": {k: v for k, v in opts.items()},
            "vocab_size": sp.get_piece_size(),
            "unk_id": sp.unk_id(), "bos_id": sp.bos_id(), "eos_id": sp.eos_id(),
            "pad_id": sp.pad_id(),
            "cases": cases,
            "decode_cases": decode_cases(sp),
            "hf_differences": hf_compare(prefix + ".model", sp, texts, [c["ids"] for c in cases]),
        }
        expected["models"][name] = m
    with open(os.path.join(out, "expected.json"), "w", encoding="utf-8") as f:
        f.write(compact_json(expected) + "\n")
    json.load(open(os.path.join(out, "expected.json"), encoding="utf-8"))  # parses back
    print("wrote", ", ".join(sorted(os.listdir(out))), "in", out)


if __name__ == "__main__":
    main()
