#include "data/token_source.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace gtp::data {
namespace {

TEST(VectorTokenSource, ReadsDocumentsAndRanges) {
  VectorTokenSource src({{1, 2, 3}, {}, {4, 5}});
  ASSERT_EQ(src.num_documents(), 3u);
  EXPECT_EQ(src.document_length(0), 3u);
  EXPECT_EQ(src.document_length(1), 0u);
  EXPECT_EQ(src.num_tokens(), 5u);
  EXPECT_EQ(src.Document(2), (std::vector<int32_t>{4, 5}));
  int32_t buf[2];
  src.Read(0, 1, 2, buf);
  EXPECT_EQ(buf[0], 2);
  EXPECT_EQ(buf[1], 3);
}

TEST(ByteTokenSource, TokensAreUnsignedBytes) {
  auto bytes = std::make_shared<const std::string>(std::string("ab\xff") + "cd");
  ByteTokenSource src(bytes, {0, 3, 5});
  EXPECT_EQ(src.Document(0), (std::vector<int32_t>{'a', 'b', 255}));
  EXPECT_EQ(src.Document(1), (std::vector<int32_t>{'c', 'd'}));
  EXPECT_EQ(src.num_tokens(), 5u);
}

TEST(SplitDocuments, DisjointCoveringProportional) {
  auto r = SplitDocuments(1000, {969, 30, 1});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[0], (DocumentRange{0, 969}));
  EXPECT_EQ((*r)[1], (DocumentRange{969, 999}));
  EXPECT_EQ((*r)[2], (DocumentRange{999, 1000}));
  for (size_t n : {0, 1, 7, 101}) {
    auto s = SplitDocuments(n, {0.95, 0.05});
    ASSERT_TRUE(s.ok());
    EXPECT_EQ((*s)[0].begin, 0u);
    EXPECT_EQ((*s)[0].end, (*s)[1].begin);
    EXPECT_EQ((*s)[1].end, n);
  }
}

TEST(SplitDocuments, RejectsBadWeights) {
  EXPECT_FALSE(SplitDocuments(10, {}).ok());
  EXPECT_FALSE(SplitDocuments(10, {0, 0}).ok());
  EXPECT_FALSE(SplitDocuments(10, {1, -1}).ok());
}

TEST(ParseSplitWeights, ParsesMegatronStrings) {
  auto w = ParseSplitWeights("969, 30,1");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(*w, (std::vector<double>{969, 30, 1}));
  auto bad = ParseSplitWeights("90,x");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("\"x\""), std::string::npos) << bad.status();
}

}  // namespace
}  // namespace gtp::data
