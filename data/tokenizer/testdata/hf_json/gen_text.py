#!/usr/bin/env python3
"""Writes text.txt: hand-picked lines, then 200 random lines drawn from pools of
words, contractions in any case, digit runs, whitespace runs (no U+0085 or
U+FEFF: the JS reference's \\s and trim differ from HF's there), CJK, emoji
sequences, composed and decomposed accents, punctuation, other scripts, added
tokens' contents and code.

    python3 data/tokenizer/testdata/hf_json/gen_text.py > data/tokenizer/testdata/hf_json/text.txt
"""
import random
import sys

HAND = [
    "hello world", "12345 and 1234567", "IT'S they'Re WE'VE i'm", "(hello \"hello\"", "a", "",
    "b", "<|begin_of_text|>hello<|end_of_text|>", "café cafe\u0301", "x <L> y <R> z", "<L>a<R>",
    "  <L>  <R>  ", "<|im_start|>user", "hi<|im_end|>", "a <tool_call>b", " hello", "<s>hello</s>",
    "hello é", "héllo wörld", "  hello  world  ", "h\u00e9", "éé", "\t\r x", "x \r\r y",
    "Ω Ω Å Å 가 각 ậ ậ",
]
pools = [
    "the quick brown fox jumps over lazy dog Hello World THE IT'S they'RE We'Ve I'M You'LL He'D "
    "don't can't".split(),
    ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'x", "''", "'"],
    ["1", "12", "123", "1234", "12345", "123456", "3.14159", "1,000,000", "٣٤٥", "१२३", "²", "½",
     "Ⅻ", "00700"],
    [" ", "  ", "   ", "\t", "\t\t", " \t ", "\r", "\r\r", " \r ", "\u00a0", "\u3000", "\u2003",
     "\u200b", "\u2028", "\u000b", "\u000c"],
    ["中文", "日本語のテキスト", "한국어", "汉字测试", "ひらがな", "カタカナ", "漢"],
    ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🇺🇸", "❤️", "🤖", "✨"],
    ["é", "e\u0301", "ñ", "n\u0303", "Å", "A\u030a", "ö", "ẞ", "ﬁ", "ß", "İ", "ı", "Ω", "\u2126"],
    ["(", ")", "[", "]", "{", "}", "...", "!!!", "???", "--", "—", "–", "“", "”", "«", "»", "@",
     "#", "$", "%", "^", "&", "*", "<", ">", "/", "\\", "|", "~", "`", ";", ":", ",", "."],
    ["مرحبا", "עברית", "नमस्ते", "தமிழ்", "ไทย", "Ελληνικά", "Русский", "Tiếng Việt"],
    ["<|endoftext|>", "<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>", "<s>",
     "</s>", "<unk>", "<L>", "<R>", "<tool_call>"],
    ["def f(x):", "return x+1;", "if (a<b) {", "}", "//comment", "#include <stdio.h>", "x_y",
     "__init__", "0x1F", "a=b"],
]
random.seed(7)
out = list(HAND)
for _ in range(200):
    parts = []
    for _ in range(random.randint(1, 25)):
        parts.append(random.choice(random.choice(pools)))
        if random.random() < 0.5:
            parts.append(random.choice([" ", "", "", "  ", "\t", "\r"]))
    out.append("".join(parts))
sys.stdout.write("".join(line + "\n" for line in out))
