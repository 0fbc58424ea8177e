#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "data/tokenizer/gpt2_tokenizer.h"
#include "data/tokenizer/internal/unicode.h"
#include "gtest/gtest.h"

namespace gtp::data {
namespace {

// A miniature GPT-2: the 256 byte tokens with GPT-2's ids (byte order of
// bytes_to_unicode: '!' is 0, ' ' is 220), then one token per merge, then
// <|endoftext|> — the layout of the real vocab.json. Tokens are spelled in
// the byte alphabet: Ġ = ' ', Ċ = '\n', "Ã©" = é (C3 A9), "Ðĸ" = Ж (D0 96).
constexpr char kMerges[] =
    "#version: 0.2\n"
    "Ġ t\n"      // 0
    "h e\n"      // 1
    "Ġt he\n"    // 2  " the"
    "i n\n"      // 3
    "Ġ w\n"      // 4
    "o r\n"      // 5
    "Ġw or\n"    // 6
    "l d\n"      // 7
    "Ġwor ld\n"  // 8  " world"
    "' s\n"      // 9  "'s"
    "' r\n"      // 10
    "'r e\n"     // 11 "'re"
    "Ã ©\n"      // 12 "é"
    "c a\n"      // 13
    "ca f\n"     // 14
    "caf Ã©\n"   // 15 "café"
    "Ġ Ġ\n"      // 16 "  "
    "1 2\n"      // 17
    "! !\n"      // 18
    "!! !\n"     // 19 "!!!"
    "Ð ĸ\n"      // 20 "Ж"
    "Ċ Ċ\n"      // 21 "\n\n"
    "e r\n"      // 22
    "r e\n"      // 23
    "Ġ b\n";     // 24 " b"

std::vector<std::string> Bytes256Tokens() {
  std::vector<int> order;
  for (int b = 0; b < 256; ++b) {
    if (Gpt2ByteToCodePoint(b) == static_cast<uint32_t>(b)) order.push_back(b);
  }
  for (int b = 0; b < 256; ++b) {
    if (Gpt2ByteToCodePoint(b) != static_cast<uint32_t>(b)) order.push_back(b);
  }
  std::vector<std::string> tokens;
  for (int b : order) {
    std::string t;
    tokenizer_internal::AppendUtf8(Gpt2ByteToCodePoint(b), &t);
    tokens.push_back(t);
  }
  return tokens;
}

// JSON the way Python's json.dumps writes vocab.json: non-ASCII as \uXXXX.
std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (size_t pos = 0; pos < s.size();) {
    tokenizer_internal::Utf8Char c = tokenizer_internal::DecodeUtf8(s, pos);
    pos += c.length;
    const uint32_t cp = static_cast<uint32_t>(c.code_point);
    if (cp == '"' || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp >= 0x20 && cp < 0x7F) {
      out += static_cast<char>(cp);
    } else if (cp < 0x10000) {
      out += absl::StrFormat("\\u%04x", cp);
    } else {
      const uint32_t v = cp - 0x10000;
      out += absl::StrFormat("\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
    }
  }
  return out + "\"";
}

std::string VocabJson() {
  std::vector<std::string> tokens = Bytes256Tokens();
  for (absl::string_view line : absl::StrSplit(kMerges, '\n', absl::SkipEmpty())) {
    if (line[0] == '#') continue;
    std::vector<std::string> ab = absl::StrSplit(line, ' ');
    tokens.push_back(ab[0] + ab[1]);
  }
  tokens.push_back("<|endoftext|>");
  std::string json = "{";
  for (size_t i = 0; i < tokens.size(); ++i) {
    absl::StrAppend(&json, i ? ", " : "", JsonString(tokens[i]), ": ", i);
  }
  return json + "}";
}

class Gpt2TokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<Gpt2Tokenizer> t = Gpt2Tokenizer::FromStrings(VocabJson(), kMerges);
    ASSERT_TRUE(t.ok()) << t.status();
    tok_.emplace(std::move(*t));
  }
  // The bytes of each token of Encode(text).
  std::vector<std::string> Pieces(const std::string& text) {
    std::vector<std::string> out;
    for (int32_t id : tok_->Encode(text, &cache_)) {
      absl::StatusOr<std::string> s = tok_->Decode({id});
      EXPECT_TRUE(s.ok());
      out.push_back(*s);
    }
    return out;
  }
  std::optional<Gpt2Tokenizer> tok_;
  BpeCache cache_;
};

using P = std::vector<std::string>;

TEST_F(Gpt2TokenizerTest, VocabularyLayout) {
  EXPECT_EQ(tok_->vocab_size(), 256 + 25 + 1);
  EXPECT_EQ(tok_->num_merges(), 25u);
  EXPECT_EQ(tok_->TokenId("!"), 0);
  EXPECT_EQ(tok_->TokenId("Ġ"), 220);
  EXPECT_EQ(tok_->TokenId("Ġthe"), 256 + 2);
  EXPECT_EQ(tok_->TokenId("<|endoftext|>"), 281);
  EXPECT_EQ(tok_->TokenId("nope"), std::nullopt);
  EXPECT_EQ(tok_->Encode("!"), (std::vector<int32_t>{0}));
  EXPECT_EQ(tok_->Encode(" "), (std::vector<int32_t>{220}));
  EXPECT_EQ(tok_->Encode(" the world"), (std::vector<int32_t>{256 + 2, 256 + 8}));
  EXPECT_EQ(*tok_->Decode({281}), "<|endoftext|>");
}

TEST(Gpt2ByteToCodePoint, MatchesGpt2) {
  EXPECT_EQ(Gpt2ByteToCodePoint('!'), uint32_t{'!'});
  EXPECT_EQ(Gpt2ByteToCodePoint(0), 0x100u);
  EXPECT_EQ(Gpt2ByteToCodePoint('\n'), 0x10Au);
  EXPECT_EQ(Gpt2ByteToCodePoint(' '), 0x120u);
  EXPECT_EQ(Gpt2ByteToCodePoint(0x7F), 0x121u);
  EXPECT_EQ(Gpt2ByteToCodePoint(0x96), 0x138u);
  EXPECT_EQ(Gpt2ByteToCodePoint(0xAD), 0x143u);
  EXPECT_EQ(Gpt2ByteToCodePoint(0xAE), 0xAEu);
}

// Expected pieces derived by hand from kMerges (ranks in the comments).
TEST_F(Gpt2TokenizerTest, MergesLowestRankFirst) {
  // Ġ t h e -> Ġt(0) h e -> Ġt he(1) -> Ġthe(2)
  EXPECT_EQ(Pieces(" the"), (P{" the"}));
  // t h e r e: he(1) < er(22) < re(23) -> t he r e -> t he re
  EXPECT_EQ(Pieces("there"), (P{"t", "he", "re"}));
  EXPECT_EQ(Pieces(" there"), (P{" the", "re"}));
  EXPECT_EQ(Pieces("her"), (P{"he", "r"}));  // he(1) beats er(22)
  EXPECT_EQ(Pieces("err"), (P{"er", "r"}));
  // Ġ w o r l d: Ġw(4), or(5), Ġwor(6), ld(7), Ġworld(8)
  EXPECT_EQ(Pieces("Hello world"), (P{"H", "e", "l", "l", "o", " world"}));
}

TEST_F(Gpt2TokenizerTest, RepeatedPairsMergeLeftToRight) {
  EXPECT_EQ(Pieces("!!"), (P{"!!"}));
  EXPECT_EQ(Pieces("!!!"), (P{"!!!"}));        // !! ! -> !!!(19)
  EXPECT_EQ(Pieces("!!!!"), (P{"!!", "!!"}));  // no "!! !!" merge
  EXPECT_EQ(Pieces("!!!!!"), (P{"!!", "!!!"}));
}

TEST_F(Gpt2TokenizerTest, Contractions) {
  EXPECT_EQ(Pieces("it's"), (P{"i", "t", "'s"}));
  EXPECT_EQ(Pieces("they're"), (P{"t", "he", "y", "'re"}));
  EXPECT_EQ(Pieces("IT'S"), (P{"I", "T", "'", "S"}));
}

TEST_F(Gpt2TokenizerTest, SpacesAndNewlines) {
  // "a  b" pre-tokenizes as "a" " " " b"; a wrong split ("a" "  " "b") would
  // give the "  " token.
  EXPECT_EQ(Pieces("a  b"), (P{"a", " ", " b"}));
  EXPECT_EQ(Pieces("a   b"), (P{"a", "  ", " b"}));
  EXPECT_EQ(Pieces("a   "), (P{"a", "  ", " "}));  // Ġ Ġ Ġ -> ĠĠ Ġ
  EXPECT_EQ(Pieces("a\n\nb"), (P{"a", "\n", "\n", "b"}));
  EXPECT_EQ(Pieces("a\n\n"), (P{"a", "\n\n"}));
  EXPECT_EQ(Pieces("a \n b"), (P{"a", " ", "\n", " b"}));
}

TEST_F(Gpt2TokenizerTest, DigitsAndPunctuation) {
  EXPECT_EQ(Pieces("12 123"), (P{"12", " ", "12", "3"}));
  EXPECT_EQ(Pieces("a12b"), (P{"a", "12", "b"}));
  // "no" "!!!" " !!": Ġ ! ! -> Ġ !!(18); there is no "Ġ !!" merge.
  EXPECT_EQ(Pieces("no!!! !!"), (P{"n", "o", "!!!", " ", "!!"}));
}

TEST_F(Gpt2TokenizerTest, NonAsciiAndEmoji) {
  // c a f Ã ©: Ã©(12), ca(13), caf(14), café(15)
  EXPECT_EQ(Pieces("café"), (P{"café"}));
  EXPECT_EQ(Pieces(" café"), (P{" ", "café"}));
  // Ж is merged; у and к stay as their bytes.
  EXPECT_EQ(Pieces("Жук"), (P{"Ж", "\xd1", "\x83", "\xd0", "\xba"}));
  EXPECT_EQ(Pieces("中"), (P{"\xe4", "\xb8", "\xad"}));
  EXPECT_EQ(Pieces("hi 👋"), (P{"h", "i", " ", "\xf0", "\x9f", "\x91", "\x8b"}));
  EXPECT_EQ(Pieces("\xff"
                   "a"),
            (P{"\xff", "a"}));
}

TEST_F(Gpt2TokenizerTest, EncodeIgnoresSpecialTokenText) {
  // Pre-tokens "<|" "endoftext" "|>", none of whose pairs has a merge.
  EXPECT_EQ(Pieces("<|endoftext|>"),
            (P{"<", "|", "e", "n", "d", "o", "f", "t", "e", "x", "t", "|", ">"}));
}

TEST_F(Gpt2TokenizerTest, DecodeRejectsUnknownIds) {
  EXPECT_FALSE(tok_->Decode({-1}).ok());
  EXPECT_FALSE(tok_->Decode({tok_->vocab_size()}).ok());
  EXPECT_EQ(*tok_->Decode({}), "");
}

TEST_F(Gpt2TokenizerTest, RoundTripsRandomBytes) {
  std::mt19937 rng(1234);
  const std::vector<std::string> atoms = {"the", " the", "'s",       "'re",  " ",
                                          "  ",  "\n\n", "12",       "!!!",  "café",
                                          "Жук", "中文", "👋🏽", "\xff", "\xe4\xb8"};
  for (int iter = 0; iter < 3000; ++iter) {
    std::string text;
    const int n = static_cast<int>(rng() % 64);
    for (int i = 0; i < n; ++i) {
      if (iter % 2 == 0)
        text.push_back(static_cast<char>(rng() % 256));
      else
        text += atoms[rng() % atoms.size()];
    }
    std::vector<int32_t> with_cache = tok_->Encode(text, &cache_);
    ASSERT_EQ(with_cache, tok_->Encode(text)) << iter;
    absl::StatusOr<std::string> back = tok_->Decode(with_cache);
    ASSERT_TRUE(back.ok());
    ASSERT_EQ(*back, text) << iter;
  }
}

TEST(Gpt2TokenizerLoad, ReadsFilesAndReportsErrors) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = tmp != nullptr ? tmp : "/tmp";
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir + "/" + name, std::ios::binary) << text;
    return dir + "/" + name;
  };
  const std::string vocab = write("vocab.json", VocabJson());
  const std::string merges = write("merges.txt", std::string(kMerges) + "\r\n");
  absl::StatusOr<Gpt2Tokenizer> t = Gpt2Tokenizer::Load(vocab, merges);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->num_merges(), 25u);

  EXPECT_EQ(Gpt2Tokenizer::Load(dir + "/missing.json", merges).status().code(),
            absl::StatusCode::kNotFound);
  absl::Status s = Gpt2Tokenizer::Load(vocab, write("bad.txt", "Ġ t\nx\n")).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("bad.txt"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("line 2"), absl::string_view::npos) << s;
  s = Gpt2Tokenizer::Load(vocab, write("oov.txt", "q z\n")).status();
  EXPECT_NE(s.message().find("not in vocab.json"), absl::string_view::npos) << s;
  // Missing byte tokens are an error: every byte must be encodable.
  s = Gpt2Tokenizer::Load(write("small.json", "{\"a\": 0}"), merges).status();
  EXPECT_NE(s.message().find("no token for byte"), absl::string_view::npos) << s;
  s = Gpt2Tokenizer::Load(write("dup.json", "{\"a\": 0, \"b\": 0}"), merges).status();
  EXPECT_NE(s.message().find("appears twice"), absl::string_view::npos) << s;
}

TEST(Gpt2TokenizerLoad, PythonWrittenTestdataMatchesTheFixture) {
  absl::StatusOr<Gpt2Tokenizer> py = Gpt2Tokenizer::Load("data/tokenizer/testdata/vocab.json",
                                                         "data/tokenizer/testdata/merges.txt");
  ASSERT_TRUE(py.ok()) << py.status();
  absl::StatusOr<Gpt2Tokenizer> fixture = Gpt2Tokenizer::FromStrings(VocabJson(), kMerges);
  ASSERT_TRUE(fixture.ok());
  EXPECT_EQ(py->vocab_size(), fixture->vocab_size());
  const std::string text = "Hello world, they're at the café!!! Жук 中 👋\n\n  12";
  EXPECT_EQ(py->Encode(text), fixture->Encode(text));
}

}  // namespace
}  // namespace gtp::data
