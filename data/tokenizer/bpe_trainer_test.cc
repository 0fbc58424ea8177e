#include "data/tokenizer/bpe_trainer.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "data/corpus.h"
#include "data/tokenizer/gpt2_tokenizer.h"
#include "data/tokenizer/hf_tokenizer.h"
#include "gtest/gtest.h"

namespace gtp::data {
namespace {

BpeVocab Train(const BpeWordCounts& words, int32_t vocab_size) {
  BpeTrainerOptions o;
  o.vocab_size = vocab_size;
  absl::StatusOr<BpeVocab> v = TrainBpe(words, o);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *std::move(v) : BpeVocab{};
}

Gpt2Tokenizer Load(const BpeVocab& v) {
  absl::StatusOr<Gpt2Tokenizer> t = Gpt2Tokenizer::FromStrings(v.VocabJson(), v.MergesTxt());
  EXPECT_TRUE(t.ok()) << t.status();
  return *std::move(t);
}

// The start of the embedded corpus: the hand-written documents and the first
// generated articles.
absl::string_view CorpusPrefix(size_t bytes) { return EmbeddedCorpus().substr(0, bytes); }

TEST(Gpt2ByteOfId, IsGpt2VocabOrder) {
  EXPECT_EQ(Gpt2ByteOfId(0), '!');
  EXPECT_EQ(Gpt2ByteOfId(64), 'a');
  EXPECT_EQ(Gpt2ByteOfId(188), 0x00);  // first of the shifted bytes
  EXPECT_EQ(Gpt2ByteOfId(198), '\n');
  EXPECT_EQ(Gpt2ByteOfId(220), ' ');
  for (int id = 1; id < 256; ++id) {
    EXPECT_LT(Gpt2ByteToCodePoint(Gpt2ByteOfId(id - 1)), Gpt2ByteToCodePoint(Gpt2ByteOfId(id)));
  }
  EXPECT_EQ(Gpt2SpellBytes(" the\n"), "\xC4\xA0the\xC4\x8A");  // Ġ the Ċ
}

// One word, merged by hand: pairs aa:4 ab:2 bd da ba ac:1 → "a a"; then
// (aa,a) and (a,b) tie at 2 and (a,b) = (64,65) < (256,64) wins; then
// "aa ab" (2); then all pairs are 1 and the smallest ids go first.
TEST(TrainBpe, HandDerivedMergesOfOneWord) {
  BpeWordCounts w;
  w.AddWord("aaabdaaabac");
  BpeVocab v = Train(w, 1000);
  EXPECT_EQ(v.MergesTxt(),
            "#version: 0.2\n"
            "a a\n"
            "a b\n"
            "aa ab\n"
            "a c\n"
            "d aaab\n"
            "aaab daaab\n"
            "aaabdaaab ac\n");
  EXPECT_EQ(v.merge_counts, (std::vector<int64_t>{4, 2, 2, 1, 1, 1, 1}));
  ASSERT_EQ(v.vocab_size(), 256 + 7 + 1);  // stops when no pair is left
  EXPECT_EQ(v.token_bytes[262], "aaabdaaabac");
  EXPECT_EQ(v.token_bytes[263], "<|endoftext|>");
  EXPECT_EQ(v.num_special, 1);
  Gpt2Tokenizer t = Load(v);
  EXPECT_EQ(t.Encode("aaabdaaabac"), (std::vector<int32_t>{262}));
  EXPECT_EQ(t.TokenId("<|endoftext|>"), 263);

  // A smaller vocabulary keeps the first merges.
  BpeVocab small = Train(w, 256 + 3 + 1);
  EXPECT_EQ(small.MergesTxt(), "#version: 0.2\na a\na b\naa ab\n");
  EXPECT_EQ(small.token_bytes.back(), "<|endoftext|>");
  EXPECT_EQ(Load(small).Encode("aaabdaaabac"),
            (std::vector<int32_t>{258, 67, 258, 64, 66}));  // aaab d aaab a c
}

// Text is pre-tokenized first: "low", " lower", " lowest". (l,o) and (o,w)
// tie at 3, l < o; then (Ġ,low) = (220,257) and (low,e) = (257,68) tie at 2,
// and the left ids decide.
TEST(TrainBpe, HandDerivedMergesOfText) {
  BpeWordCounts w;
  w.AddText("low lower lowest");
  EXPECT_EQ(w.num_words(), 3);
  EXPECT_EQ(w.num_bytes(), 16);
  BpeVocab v = Train(w, 1000);
  EXPECT_EQ(v.MergesTxt(),
            "#version: 0.2\n"
            "l o\n"
            "lo w\n"
            "Ġ low\n"
            "Ġlow e\n"
            "s t\n"
            "Ġlowe r\n"
            "Ġlowe st\n");
  EXPECT_EQ(Load(v).Encode("low lower lowest"), (std::vector<int32_t>{257, 261, 262}));
}

TEST(TrainBpe, VocabJsonIsGpt2Layout) {
  BpeWordCounts w;
  w.AddWord("\"\\\"\\");
  BpeVocab v = Train(w, 258);
  const std::string json = v.VocabJson();
  EXPECT_EQ(json.substr(0, 22), R"({"!":0,"\"":1,"#":2,"$)");
  EXPECT_NE(json.find(R"("\\":59,)"), std::string::npos);
  EXPECT_NE(json.find(R"("Ġ":220,)"), std::string::npos);
  EXPECT_TRUE(absl::EndsWith(json, R"(,"\"\\":256,"<|endoftext|>":257})"))
      << json.substr(json.size() - 40);
  EXPECT_EQ(v.MergesTxt(), "#version: 0.2\n\" \\\n");
}

TEST(TrainBpe, LoadsAndEncodeDecodeIsIdentity) {
  const absl::string_view text = CorpusPrefix(64 << 10);
  BpeWordCounts w;
  w.AddText(text);
  BpeVocab v = Train(w, 1024);
  ASSERT_EQ(v.vocab_size(), 1024);
  ASSERT_EQ(v.merges.size(), 1024u - 257u);
  Gpt2Tokenizer t = Load(v);
  EXPECT_EQ(t.vocab_size(), 1024);
  EXPECT_EQ(t.num_merges(), v.merges.size());
  EXPECT_EQ(t.TokenId("<|endoftext|>"), 1023);
  BpeCache cache;
  std::vector<int32_t> ids = t.Encode(text, &cache);
  absl::StatusOr<std::string> back = t.Decode(ids);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, text);
  // Text it never saw, bytes that are not UTF-8 included.
  const std::string other = "Zürich \xff\xfe\n\tthe end 1234 ''";
  EXPECT_EQ(*t.Decode(t.Encode(other)), other);
  // Counts of chosen pairs fall (no merge here reuses a token).
  for (size_t i = 1; i < v.merge_counts.size(); ++i) {
    EXPECT_LE(v.merge_counts[i], v.merge_counts[i - 1]) << "merge " << i;
  }
}

TEST(TrainBpe, MoreMergesEncodeShorter) {
  const absl::string_view text = CorpusPrefix(32 << 10);
  BpeWordCounts w;
  w.AddText(text);
  size_t previous = text.size() + 1;
  for (int32_t vocab : {257, 300, 400, 600, 1000, 2000}) {
    const size_t n = Load(Train(w, vocab)).Encode(text).size();
    if (vocab == 257) {
      EXPECT_EQ(n, text.size());  // no merges: one token per byte
    }
    EXPECT_LT(n, previous) << "vocab " << vocab;
    std::printf("vocab %4d: %zu tokens (%.2f bytes/token)\n", vocab, n,
                static_cast<double>(text.size()) / n);
    previous = n;
  }
}

TEST(TrainBpe, DeterministicAndOrderFree) {
  const absl::string_view text = CorpusPrefix(16 << 10);
  BpeWordCounts forward, backward;
  forward.AddText(text);
  // The same words counted in another order.
  std::vector<std::pair<std::string, int64_t>> pieces(forward.counts().begin(),
                                                      forward.counts().end());
  std::sort(pieces.begin(), pieces.end());
  for (size_t i = pieces.size(); i-- > 0;) backward.AddWord(pieces[i].first, pieces[i].second);
  const BpeVocab a = Train(forward, 700), b = Train(backward, 700), c = Train(forward, 700);
  EXPECT_EQ(a.MergesTxt(), b.MergesTxt());
  EXPECT_EQ(a.VocabJson(), b.VocabJson());
  EXPECT_EQ(a.MergesTxt(), c.MergesTxt());
}

TEST(TrainBpe, WritesFilesThatLoad) {
  BpeWordCounts w;
  w.AddText(CorpusPrefix(8 << 10));
  BpeVocab v = Train(w, 400);
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp ? tmp : "/tmp", "/bpe_trainer_test/out");
  ASSERT_TRUE(v.Write(dir).ok());
  absl::StatusOr<Gpt2Tokenizer> t = Gpt2Tokenizer::Load(dir + "/vocab.json", dir + "/merges.txt");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->vocab_size(), 400);
  // tokenizer.json: the same ids through HfTokenizer, <|endoftext|> special.
  absl::StatusOr<HfTokenizer> hf = HfTokenizer::Load(dir + "/tokenizer.json");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->vocab_size(), 400);
  EXPECT_EQ(hf->SpecialTokenId("<|endoftext|>"), 399);
  const std::string text(CorpusPrefix(16 << 10));
  EXPECT_EQ(hf->Encode(text), t->Encode(text));
  EXPECT_EQ(hf->Encode("a<|endoftext|>"), (std::vector<int32_t>{64, 399}));
  EXPECT_FALSE(v.Write("/proc/no/such/dir").ok());
}

TEST(TrainBpe, RejectsBadOptions) {
  BpeWordCounts w;
  w.AddWord("abc");
  BpeTrainerOptions o;
  o.vocab_size = 256;  // no room for <|endoftext|>
  EXPECT_EQ(TrainBpe(w, o).status().code(), absl::StatusCode::kInvalidArgument);
  o.vocab_size = 300;
  o.special_tokens = {"<|endoftext|>", "<|endoftext|>"};
  EXPECT_EQ(TrainBpe(w, o).status().code(), absl::StatusCode::kInvalidArgument);
  o.special_tokens = {""};
  EXPECT_EQ(TrainBpe(w, o).status().code(), absl::StatusCode::kInvalidArgument);
  o.special_tokens = {"abc"};  // what "a b", "ab c" learn
  EXPECT_EQ(TrainBpe(w, o).status().code(), absl::StatusCode::kInvalidArgument);
  o.special_tokens = {"<|pad|>", "<|endoftext|>"};
  absl::StatusOr<BpeVocab> v = TrainBpe(w, o);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->token_bytes.back(), "<|endoftext|>");
  EXPECT_EQ(v->token_bytes[v->vocab_size() - 2], "<|pad|>");
}

}  // namespace
}  // namespace gtp::data
