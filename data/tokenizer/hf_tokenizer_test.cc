// HfTokenizer on the hand-made tokenizer.json fixtures of testdata/hf_json/
// (make_fixtures.py writes them; README.md there says what each mirrors).
//
// Byte-level fixtures give the 256 byte tokens GPT-2's ids: '!'..'~' are
// 0..93 (char - 33: 'a' 64, 'h' 71, '1' 16), then the non-printable bytes in
// byte order from 188 ('\n' Ċ 198, ' ' Ġ 220); merged tokens follow from 256
// in merge order. Every expected id below is derived by hand from that layout
// and the merge ranks in the comments.
#include "data/tokenizer/hf_tokenizer.h"

#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "data/tokenizer/gpt2_tokenizer.h"
#include "data/tokenizer/internal/nfc.h"
#include "gtest/gtest.h"

namespace gtp::data {
namespace {

using Ids = std::vector<int32_t>;

std::string Fixture(const std::string& name) {
  std::ifstream f("data/tokenizer/testdata/hf_json/" + name, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

HfTokenizer Must(absl::string_view json) {
  absl::StatusOr<HfTokenizer> t = HfTokenizer::FromString(json);
  EXPECT_TRUE(t.ok()) << t.status();
  return std::move(*t);
}

HfTokenizer Load(const std::string& name) { return Must(Fixture(name)); }

// The fixture with one literal edit (which must apply).
HfTokenizer Edited(const std::string& name, const std::string& from, const std::string& to) {
  std::string json = Fixture(name);
  EXPECT_NE(json.find(from), std::string::npos) << from;
  return Must(absl::StrReplaceAll(json, {{from, to}}));
}

// llama3_style.json: Split(Llama-3 regex) + ByteLevel, ignore_merges, merges
// 256 Ġh, 257 el, 258 lo, 259 Ġhel, 260 Ġhello, 261 12, 262 123, 263 'S,
// 264 ĊĊ, 265 hel, 266 hello; 267 Ġworld and 268 (hello only in the vocab;
// added 269 <|begin_of_text|>, 270 <|end_of_text|>.
TEST(HfTokenizer, Llama3StyleByHand) {
  HfTokenizer t = Load("llama3_style.json");
  EXPECT_EQ(t.vocab_size(), 271);
  // "hello" " world": both whole vocab entries, taken as such (ignore_merges).
  EXPECT_EQ(t.Encode("hello world"), (Ids{266, 267}));
  // Digits in threes: "123" (12 rank 5, then 123 rank 6) "45".
  EXPECT_EQ(t.Encode("12345"), (Ids{262, 19, 20}));
  EXPECT_EQ(t.Encode("1234567"), (Ids{262, 19, 20, 21, 22}));
  // Case-insensitive contraction: "IT" "'S" (rank 7); GPT-2 would split "'" "S".
  EXPECT_EQ(t.Encode("IT'S"), (Ids{40, 51, 263}));
  // One non-letter before letters joins them: "(hello" is one piece, a vocab entry.
  EXPECT_EQ(t.Encode("(hello"), (Ids{268}));
  // `\s*[\r\n]+`: "\n\n" is one piece, Ċ Ċ -> ĊĊ (rank 8).
  EXPECT_EQ(t.Encode("a\n\nb"), (Ids{64, 264, 65}));
  // "hello" " " " world": the space before a word leads it.
  EXPECT_EQ(t.Encode("hello  world"), (Ids{266, 220, 267}));
  // " !!\n" (punctuation with its newline) then "x".
  EXPECT_EQ(t.Encode(" !!\nx"), (Ids{220, 0, 0, 198, 87}));
  // Special tokens are cut out of the text first.
  EXPECT_EQ(t.Encode("<|begin_of_text|>hello<|end_of_text|>"), (Ids{269, 266, 270}));
  // Not quite one: "<|" "begin" "_of" "_text" "|", bytes (no merges apply).
  EXPECT_EQ(t.Encode("<|begin_of_text|"),
            (Ids{27, 91, 65, 68, 70, 72, 77, 62, 78, 69, 62, 83, 68, 87, 83, 91}));
  EXPECT_EQ(*t.Decode({269, 266, 270}), "<|begin_of_text|>hello<|end_of_text|>");
  EXPECT_EQ(*t.Decode({266, 220, 267, 264}), "hello  world\n\n");
  EXPECT_EQ(t.TokenId("Ġworld"), 267);
  EXPECT_EQ(t.TokenId("<|end_of_text|>"), 270);
  EXPECT_EQ(t.SpecialTokenId("<|end_of_text|>"), 270);
  EXPECT_EQ(t.SpecialTokenId("hello"), std::nullopt);
  EXPECT_EQ(t.TokenId("nope"), std::nullopt);
  EXPECT_FALSE(t.Decode({271}).ok());
  EXPECT_FALSE(t.Decode({-1}).ok());
}

TEST(HfTokenizer, IgnoreMergesOffMergesByRank) {
  HfTokenizer t =
      Edited("llama3_style.json", "\"ignore_merges\": true", "\"ignore_merges\": false");
  // h e l l o: el (1), lo (2), hel (9), hello (10): the same token.
  EXPECT_EQ(t.Encode("hello"), (Ids{266}));
  // Ġ w o r l d has no merges: the vocab entry Ġworld is not reached.
  EXPECT_EQ(t.Encode(" world"), (Ids{220, 86, 78, 81, 75, 67}));
  // ( h e l l o: el, lo, hel, hello; "(hello" stays out of reach.
  EXPECT_EQ(t.Encode("(hello"), (Ids{7, 266}));
}

// qwen2_style.json: NFC + Split(Qwen2 regex) + ByteLevel, "a b" merges
// 256 Ã© (é), 257 ca, 258 caf, 259 café, 260 Ġa; added 261 <|endoftext|>,
// 262 <|im_start|>, 263 <|im_end|>, 264 <tool_call> (not special), 265 <L>
// (lstrip), 266 <R> (rstrip).
TEST(HfTokenizer, Qwen2StyleByHand) {
  HfTokenizer t = Load("qwen2_style.json");
  EXPECT_EQ(t.Encode("café"), (Ids{259}));
  // NFC composes e + U+0301 into é first.
  EXPECT_EQ(t.Encode("cafe\xCC\x81"), (Ids{259}));
  EXPECT_EQ(t.Encode("123"), (Ids{16, 17, 18}));  // one digit per piece
  EXPECT_EQ(t.Encode(" a"), (Ids{260}));
  EXPECT_EQ(t.Encode("<|im_start|>user\n<|im_end|>"), (Ids{262, 84, 82, 68, 81, 198, 263}));
  EXPECT_EQ(t.Encode("a <tool_call>b"), (Ids{64, 220, 264, 65}));
  EXPECT_EQ(t.SpecialTokenId("<tool_call>"), std::nullopt);
  EXPECT_EQ(t.TokenId("<tool_call>"), 264);
  // lstrip: <L> takes the space before it; rstrip: <R> the space after it.
  EXPECT_EQ(t.Encode("x <L> y"), (Ids{87, 265, 220, 88}));
  EXPECT_EQ(t.Encode("x <R> y"), (Ids{87, 220, 266, 88}));
  EXPECT_EQ(t.Encode("x \t <L>"), (Ids{87, 265}));
  // The stripped whitespace is gone for good.
  EXPECT_EQ(*t.Decode({87, 265, 220, 88}), "x<L> y");
  EXPECT_EQ(*t.Decode({259, 261}), "café<|endoftext|>");
}

// llama2_style.json: Prepend "▁" and Replace " " -> "▁" normalizers, no
// pre-tokenizer, byte_fallback (<0xNN> = 3 + NN), unk <unk> 0, fuse_unk;
// pieces 259 ▁, 260 h, 261 e, 262 l, 263 o, 264 w, 265 r, 266 d; merges
// 267 ▁h, 268 el, 269 ▁hel, 270 lo, 271 ▁hello, 272 ▁w, 273 or, 274 ▁wor,
// 275 ▁worl, 276 ▁world, 277 ▁▁; decoder Replace, ByteFallback, Fuse, Strip.
TEST(HfTokenizer, Llama2StyleByHand) {
  HfTokenizer t = Load("llama2_style.json");
  EXPECT_EQ(t.Encode("hello world"), (Ids{271, 276}));
  // é is not a piece: its bytes C3 A9 as <0xC3> <0xA9>.
  EXPECT_EQ(t.Encode("hello é"), (Ids{271, 259, 198, 172}));
  EXPECT_EQ(*t.Decode({271, 259, 198, 172}), "hello é");
  // "▁▁▁hello": ▁hello first (ranks 0..4), then ▁ ▁ -> ▁▁ (rank 10).
  EXPECT_EQ(t.Encode("  hello"), (Ids{277, 271}));
  EXPECT_EQ(*t.Decode({277, 271}), "  hello");
  // Each segment between added tokens is normalized (so prefixed) alone,
  // and Decode strips each run's prefix.
  EXPECT_EQ(t.Encode("<s>hello</s>"), (Ids{1, 271, 2}));
  EXPECT_EQ(*t.Decode({1, 271, 2}), "<s>hello</s>");
  EXPECT_EQ(t.SpecialTokenId("</s>"), 2);
}

TEST(HfTokenizer, UnkWithoutByteFallback) {
  HfTokenizer fused =
      Edited("llama2_style.json", "\"byte_fallback\": true", "\"byte_fallback\": false");
  EXPECT_EQ(fused.Encode("héé"), (Ids{267, 0}));  // ▁h, one <unk> for é é
  HfTokenizer t = Must(absl::StrReplaceAll(Fixture("llama2_style.json"),
                                           {{"\"byte_fallback\": true", "\"byte_fallback\": false"},
                                            {"\"fuse_unk\": true", "\"fuse_unk\": false"}}));
  EXPECT_EQ(t.Encode("héé"), (Ids{267, 0, 0}));
}

// metaspace_style.json: the llama2_style vocabulary and decoder with a
// Metaspace pre-tokenizer (prepend_scheme "first", split false).
TEST(HfTokenizer, MetaspaceByHand) {
  HfTokenizer t = Load("metaspace_style.json");
  EXPECT_EQ(t.Encode("hello world"), (Ids{271, 276}));
  // Only the segment at the start of the text is prefixed: h el lo.
  EXPECT_EQ(t.Encode("<s>hello"), (Ids{1, 260, 268, 270}));
  EXPECT_EQ(*t.Decode({1, 260, 268, 270}), "<s>hello");
  EXPECT_EQ(*t.Decode({271, 276}), "hello world");
  // A text that starts with a space is not prefixed again: the space is lost.
  EXPECT_EQ(t.Encode(" hello"), (Ids{271}));
  EXPECT_EQ(*t.Decode({271}), "hello");
  // split false lets ▁ ▁ merge across words; split true cuts before each ▁.
  EXPECT_EQ(t.Encode("hello  "), (Ids{271, 277}));
  HfTokenizer split = Edited("metaspace_style.json", "\"split\": false", "\"split\": true");
  EXPECT_EQ(split.Encode("hello  "), (Ids{271, 259, 259}));
}

// gpt2_hf.json is testdata/hf/vocab.json + merges.txt, trained by HF
// tokenizers, as a GPT-2 tokenizer.json; testdata/hf/ids.txt holds the ids
// HF tokenizers 0.23.2 gave for each line of testdata/hf_text.txt.
TEST(HfTokenizer, Gpt2FileMatchesHfIds) {
  HfTokenizer t = Load("gpt2_hf.json");
  std::ifstream text("data/tokenizer/testdata/hf_text.txt"),
      ids("data/tokenizer/testdata/hf/ids.txt");
  std::string line, want;
  int n = 0;
  while (std::getline(text, line) && std::getline(ids, want)) {
    Ids expect;
    for (absl::string_view f : absl::StrSplit(want, ' ', absl::SkipEmpty())) {
      expect.push_back(std::stoi(std::string(f)));
    }
    EXPECT_EQ(t.Encode(line), expect) << "line " << n;
    ++n;
  }
  EXPECT_GT(n, 5);
}

// Random text from pieces that stress every rule: scripts, CJK, emoji
// sequences, combining marks, whitespace runs, digit runs, contractions and
// added tokens.
std::vector<std::string> RandomTexts(int count, bool raw_bytes) {
  const std::vector<std::string> pool = {"hello",
                                         "World",
                                         " the",
                                         "IT'S",
                                         "they're",
                                         "'ve",
                                         "'LL",
                                         "12",
                                         "123456789",
                                         "3.14",
                                         " ",
                                         "  ",
                                         "   ",
                                         "\t",
                                         "\n",
                                         "\r\n",
                                         "\n\n",
                                         " \n ",
                                         "\xC2\xA0",
                                         "\xE3\x80\x80",
                                         "中文",
                                         "日本語",
                                         "한국어",
                                         "ไทย",
                                         "मनुष्य",
                                         "Ελληνικά",
                                         "Русский",
                                         "عربي",
                                         "😀",
                                         "👍🏽",
                                         "👨‍👩‍👧",
                                         "🇺🇸",
                                         "e\xCC\x81",
                                         "a\xCC\x8A\xCC\x81",
                                         "\xE1\x84\x80\xE1\x85\xA1",
                                         "(",
                                         ")!",
                                         "...",
                                         "—",
                                         "“q”",
                                         "#include",
                                         "x_y",
                                         "<|endoftext|>",
                                         "<|end_of_text|>",
                                         "<s>",
                                         "</s>",
                                         "<L>",
                                         "<R>",
                                         "<|im_start|>",
                                         "é",
                                         "hello",
                                         "world"};
  std::mt19937 rng(42);
  std::vector<std::string> out;
  for (int i = 0; i < count; ++i) {
    std::string s;
    const int n = 1 + static_cast<int>(rng() % 12);
    for (int k = 0; k < n; ++k) {
      if (raw_bytes && rng() % 8 == 0) {
        s.push_back(static_cast<char>(rng() % 256));  // often invalid UTF-8
      } else {
        s += pool[rng() % pool.size()];
      }
    }
    out.push_back(s);
  }
  return out;
}

TEST(HfTokenizer, ByteLevelRoundTripsEveryByteString) {
  for (const char* name : {"llama3_style.json", "gpt2_hf.json"}) {
    HfTokenizer t = Load(name);
    BpeCache cache;
    for (const std::string& s : RandomTexts(400, /*raw_bytes=*/true)) {
      absl::StatusOr<std::string> back = t.Decode(t.Encode(s, &cache));
      ASSERT_TRUE(back.ok()) << back.status();
      EXPECT_EQ(*back, s) << name;
    }
  }
}

TEST(HfTokenizer, NfcRoundTripGivesTheNfcText) {
  for (const char* name : {"qwen2_style.json", "qwen3_2k.json"}) {
    HfTokenizer t = Load(name);
    for (std::string s : RandomTexts(300, /*raw_bytes=*/true)) {
      // qwen2_style's <L> and <R> drop the whitespace beside them (lstrip, rstrip).
      s = absl::StrReplaceAll(s, {{"<L>", ""}, {"<R>", ""}});
      EXPECT_EQ(*t.Decode(t.Encode(s)), tokenizer_internal::Nfc(s)) << name;
    }
  }
}

TEST(HfTokenizer, SentencePieceStyleRoundTrips) {
  // Lossless except for "▁" in the text (none here) and, under Metaspace, a
  // leading space.
  HfTokenizer llama2 = Load("llama2_style.json"), meta = Load("metaspace_style.json");
  for (std::string s : RandomTexts(300, /*raw_bytes=*/false)) {
    EXPECT_EQ(*llama2.Decode(llama2.Encode(s)), s);
    while (!s.empty() && s[0] == ' ') s.erase(0, 1);
    EXPECT_EQ(*meta.Decode(meta.Encode(s)), s);
  }
}

TEST(HfTokenizer, Gpt2FileAgreesWithGpt2Tokenizer) {
  HfTokenizer hf = Load("gpt2_hf.json");
  absl::StatusOr<Gpt2Tokenizer> g = Gpt2Tokenizer::Load("data/tokenizer/testdata/hf/vocab.json",
                                                        "data/tokenizer/testdata/hf/merges.txt");
  ASSERT_TRUE(g.ok()) << g.status();
  for (const std::string& s : RandomTexts(300, /*raw_bytes=*/true)) {
    EXPECT_EQ(hf.Encode(s), g->Encode(s));
  }
}

// Everything not implemented is refused at load, naming the field and value.
TEST(HfTokenizer, RefusesWhatItDoesNotImplement) {
  const std::string base = Fixture("llama3_style.json");
  const std::string regex =
      R"("Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|)";
  ASSERT_NE(base.find(regex), std::string::npos);
  struct Case {
    std::string from, to, error;
  };
  const std::vector<Case> cases = {
      {"\"type\": \"BPE\"", "\"type\": \"WordPiece\"",
       "model.type: \"WordPiece\" is not supported (supported: BPE)"},
      {"\"normalizer\": null", "\"normalizer\": {\"type\": \"NFKC\"}",
       "normalizer.type: \"NFKC\" is not supported"},
      {"\"normalizer\": null",
       "\"normalizer\": {\"type\": \"Replace\", \"pattern\": {\"Regex\": \" +\"}, \"content\": \" "
       "\"}",
       "normalizer.pattern.Regex: \" +\" is not supported"},
      {regex, R"("Regex": "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}]*|)",
       R"(pre_tokenizer.pretokenizers[0].pattern.Regex: "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}]*|)"},
      {"\"type\": \"Split\"", "\"type\": \"Digits\"",
       "pre_tokenizer.pretokenizers[0].type: \"Digits\" is not supported"},
      {"\"behavior\": \"Isolated\"", "\"behavior\": \"Removed\"",
       "pre_tokenizer.pretokenizers[0].behavior: \"Removed\" is not supported"},
      {"\"invert\": false", "\"invert\": true", "pretokenizers[0].invert: true is not supported"},
      {"\"decoder\": {\n  \"type\": \"ByteLevel\"", "\"decoder\": {\n  \"type\": \"WordPiece\"",
       "decoder.type: \"WordPiece\" is not supported"},
      {"\"continuing_subword_prefix\": null", "\"continuing_subword_prefix\": \"##\"",
       "model.continuing_subword_prefix: \"##\" is not supported"},
      {"\"end_of_word_suffix\": null", "\"end_of_word_suffix\": \"</w>\"",
       "model.end_of_word_suffix: \"</w>\" is not supported"},
      {"\"dropout\": null", "\"dropout\": 0.1", "model.dropout: 0.1 is not supported"},
      {"\"dropout\": null", "\"dropout\": null, \"foo\": 1", "model.foo is not supported"},
      {"\"single_word\": false", "\"single_word\": true",
       "added_tokens[0].single_word: true is not supported"},
      {"\"truncation\": null", "\"truncation\": {\"max_length\": 8}",
       "truncation: an object is not supported"},
      {"\"padding\": null", "\"padding\": {}", "padding: an object is not supported"},
      {"\"version\": \"1.0\"", "\"version\": \"1.0\", \"extra\": 1", "extra is not supported"},
      {"\"ignore_merges\": true", "\"ignore_merges\": 1",
       "model.ignore_merges: 1 is not true or false"},
      {"\"id\": 270", "\"id\": 269",
       "added_tokens[1] (\"<|end_of_text|>\", id 269): the id appears twice"},
      {"\"id\": 270", "\"id\": 266", "model.vocab gives id 266 to \"hello\""},
      // An added token outside the vocabulary takes the next id in file order
      // in Hugging Face's tokenizers, whatever the file says.
      {"\"id\": 270", "\"id\": 271",
       "added_tokens[1] (\"<|end_of_text|>\", id 271): not in model.vocab, so Hugging Face's "
       "tokenizers gives it id 270"},
      {"\"(hello\": 268", "\"(hello\": 267", "model.vocab: id 267 appears twice"},
      {"\"Ġworld\": 267", "\"Ġworld\": 267, \"Ġworld\": 9", "appears twice"},
      {"\"Ġ\": 220", "\"Ġx\": 220", "no ByteLevel token for byte 32"},
      {"\"decoder\": {\n  \"type\": \"ByteLevel\",\n  \"add_prefix_space\": true,\n  "
       "\"trim_offsets\": true,\n  \"use_regex\": true\n }",
       "\"decoder\": null", "decoder: null is not supported"},
  };
  for (const Case& c : cases) {
    ASSERT_NE(base.find(c.from), std::string::npos) << c.from;
    absl::StatusOr<HfTokenizer> t =
        HfTokenizer::FromString(absl::StrReplaceAll(base, {{c.from, c.to}}));
    ASSERT_FALSE(t.ok()) << c.to;
    EXPECT_NE(t.status().message().find(c.error), std::string::npos)
        << "got: " << t.status().message() << "\nwant: " << c.error;
  }
  // A merge naming a token not in the vocabulary.
  const std::string bad_merge =
      absl::StrReplaceAll(base, {{"\"hel\",\n    \"lo\"", "\"hel\",\n    \"zz\""}});
  ASSERT_NE(bad_merge, base);
  EXPECT_NE(HfTokenizer::FromString(bad_merge).status().message().find(
                "model.merges[10]: [\"hel\", \"zz\"] names a token not in"),
            std::string::npos);
  absl::StatusOr<HfTokenizer> missing = HfTokenizer::Load("/nonexistent/tokenizer.json");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

TEST(HfTokenizer, RefusesModelsThatWouldDropCharacters) {
  // Neither ByteLevel nor byte_fallback nor unk_token: HF drops unknown characters.
  const std::string json = absl::StrReplaceAll(
      Fixture("metaspace_style.json"), {{"\"byte_fallback\": true", "\"byte_fallback\": false"},
                                        {"\"unk_token\": \"<unk>\"", "\"unk_token\": null"}});
  absl::StatusOr<HfTokenizer> t = HfTokenizer::FromString(json);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("HF would drop every character"), std::string::npos)
      << t.status();
}

TEST(HfTokenizer, RefusesDecodersThatDoNotUndoTheEncoder) {
  const std::string base = Fixture("metaspace_style.json");
  struct Case {
    std::string from, to, error;
  };
  const std::vector<Case> cases = {
      {"\"type\": \"ByteFallback\"", "\"type\": \"Fuse\"",
       "has no ByteFallback step, so model.byte_fallback's <0xNN> tokens"},
      {"\"prepend_scheme\": \"first\"", "\"prepend_scheme\": \"never\"",
       "decoder: its step 3 (Strip) removes a leading space that no normalizer or pre-tokenizer "
       "adds"},
      {"\"stop\": 0", "\"stop\": 1", "decoder.decoders[3].stop: 1 is not supported"},
  };
  for (const Case& c : cases) {
    ASSERT_NE(base.find(c.from), std::string::npos) << c.from;
    absl::StatusOr<HfTokenizer> t =
        HfTokenizer::FromString(absl::StrReplaceAll(base, {{c.from, c.to}}));
    ASSERT_FALSE(t.ok()) << c.to;
    EXPECT_NE(t.status().message().find(c.error), std::string::npos)
        << "got: " << t.status().message() << "\nwant: " << c.error;
  }
  const std::string llama3 = Fixture("llama3_style.json");
  const std::string decoder =
      "\"decoder\": {\n  \"type\": \"ByteLevel\",\n  \"add_prefix_space\": true,\n  "
      "\"trim_offsets\": true,\n  \"use_regex\": true\n }";
  ASSERT_NE(llama3.find(decoder), std::string::npos);
  absl::StatusOr<HfTokenizer> t = HfTokenizer::FromString(
      absl::StrReplaceAll(llama3, {{decoder, "\"decoder\": {\"type\": \"Fuse\"}"}}));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("has no ByteLevel step"), std::string::npos) << t.status();
}

}  // namespace
}  // namespace gtp::data
