#include "data/corpus.h"

#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace gtp::data {
namespace {

uint64_t Fnv1a(absl::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

// The corpus is part of data/'s contract: byte-level golden losses depend on
// every byte. If you change the text or the generator on purpose, update
// this hash and bump data/VERSION (minor).
constexpr uint64_t kGoldenHash = 0xb2c8c9c8c03d4082ull;

TEST(EmbeddedCorpus, HasTheExpectedSizeAndIsStable) {
  absl::string_view c = EmbeddedCorpus();
  EXPECT_EQ(c.size(), kEmbeddedCorpusBytes);
  EXPECT_EQ(c.data(), EmbeddedCorpus().data());  // built once
  char hex[32];
  std::snprintf(hex, sizeof(hex), "0x%016llx", static_cast<unsigned long long>(Fnv1a(c)));
  EXPECT_EQ(Fnv1a(c), kGoldenHash) << "corpus hash is now " << hex;
}

TEST(EmbeddedCorpus, GeneratorIsDeterministic) {
  EXPECT_EQ(GenerateArticle(kEmbeddedCorpusSeed, 3), GenerateArticle(kEmbeddedCorpusSeed, 3));
  EXPECT_NE(GenerateArticle(kEmbeddedCorpusSeed, 3), GenerateArticle(kEmbeddedCorpusSeed, 4));
  EXPECT_NE(GenerateArticle(kEmbeddedCorpusSeed, 3), GenerateArticle(kEmbeddedCorpusSeed + 1, 3));
  // The corpus is the hand-written documents, then articles 0, 1, 2, ...
  const auto& off = EmbeddedCorpusDocumentOffsets();
  size_t h = EmbeddedCorpusNumHandwrittenDocuments();
  std::string first = GenerateArticle(kEmbeddedCorpusSeed, 0);
  EXPECT_EQ(EmbeddedCorpus().substr(off[h], off[h + 1] - off[h]), first);
}

TEST(EmbeddedCorpus, IsPrintableAsciiWithProseFirst) {
  absl::string_view c = EmbeddedCorpus();
  for (size_t i = 0; i < c.size(); ++i) {
    unsigned char b = c[i];
    ASSERT_TRUE(b == '\n' || (b >= 0x20 && b < 0x7f)) << "byte " << int(b) << " at " << i;
  }
  EXPECT_TRUE(absl::StartsWith(c, "On sharing a weight\n\n"));
  EXPECT_GE(EmbeddedCorpusNumHandwrittenDocuments(), 3u);
  // Generated text has the shape of English: words, sentences, paragraphs.
  absl::string_view tail = c.substr(c.size() / 2, 4096);
  EXPECT_TRUE(absl::StrContains(tail, ". "));
  EXPECT_TRUE(absl::StrContains(tail, "\n\n"));
  EXPECT_TRUE(absl::StrContains(tail, " the "));
}

TEST(EmbeddedCorpus, DocumentsAndSplits) {
  const auto& off = EmbeddedCorpusDocumentOffsets();
  ASSERT_GE(off.size(), 3u);
  EXPECT_EQ(off.front(), 0u);
  EXPECT_EQ(off.back(), kEmbeddedCorpusBytes);
  for (size_t i = 1; i < off.size(); ++i) ASSERT_LT(off[i - 1], off[i]);
  const size_t n = off.size() - 1;
  DocumentRange all = EmbeddedCorpusSplit(CorpusSplit::kAll);
  DocumentRange train = EmbeddedCorpusSplit(CorpusSplit::kTrain);
  DocumentRange val = EmbeddedCorpusSplit(CorpusSplit::kValidation);
  EXPECT_EQ(all, (DocumentRange{0, n}));
  EXPECT_EQ(train.begin, 0u);
  EXPECT_EQ(train.end, val.begin);
  EXPECT_EQ(val.end, n);
  EXPECT_GT(val.size(), 0u);
  EXPECT_GT(train.size(), 10 * val.size());

  auto src = EmbeddedCorpusSource();
  ASSERT_EQ(src->num_documents(), n);
  EXPECT_EQ(src->num_tokens(), kEmbeddedCorpusBytes);
  std::vector<int32_t> doc = src->Document(n - 1);
  ASSERT_EQ(doc.size(), off[n] - off[n - 1]);
  for (size_t i = 0; i < doc.size(); ++i) {
    ASSERT_EQ(doc[i], static_cast<unsigned char>(EmbeddedCorpus()[off[n - 1] + i]));
  }
}

TEST(ParseCorpusSplit, Names) {
  EXPECT_EQ(*ParseCorpusSplit("train"), CorpusSplit::kTrain);
  EXPECT_EQ(*ParseCorpusSplit("Validation"), CorpusSplit::kValidation);
  EXPECT_EQ(*ParseCorpusSplit("val"), CorpusSplit::kValidation);
  EXPECT_EQ(*ParseCorpusSplit("all"), CorpusSplit::kAll);
  EXPECT_FALSE(ParseCorpusSplit("test").ok());
}

}  // namespace
}  // namespace gtp::data
