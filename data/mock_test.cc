#include "data/mock.h"

#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace gtp::data {
namespace {

std::shared_ptr<MockTokenSource> Make(uint64_t seed, int64_t vocab = 1000) {
  MockOptions o;
  o.vocab_size = vocab;
  o.num_documents = 50;
  o.min_document_length = 5;
  o.max_document_length = 40;
  o.seed = seed;
  auto s = MockTokenSource::Create(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

TEST(MockTokenSource, DeterministicInRangeAndSeeded) {
  auto a = Make(7), b = Make(7), c = Make(8);
  std::set<size_t> lengths;
  std::set<int32_t> values;
  int differs = 0;
  for (size_t d = 0; d < a->num_documents(); ++d) {
    std::vector<int32_t> x = a->Document(d);
    EXPECT_EQ(x, b->Document(d));
    if (x != c->Document(d)) ++differs;
    ASSERT_GE(x.size(), 5u);
    ASSERT_LE(x.size(), 40u);
    lengths.insert(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_GE(x[i], 0);
      ASSERT_LT(x[i], 1000);
      ASSERT_EQ(x[i], MockToken(7, 1000, d, i));
      values.insert(x[i]);
    }
    // A partial read agrees with the whole document.
    std::vector<int32_t> part(x.size() - 2);
    a->Read(d, 2, part.size(), part.data());
    EXPECT_EQ(part, std::vector<int32_t>(x.begin() + 2, x.end()));
  }
  EXPECT_GT(differs, 45);
  EXPECT_GT(lengths.size(), 10u);
  EXPECT_GT(values.size(), 500u);  // ~1000 draws over 1000 values
}

TEST(MockTokenSource, RejectsBadOptions) {
  MockOptions o;
  o.vocab_size = 0;
  EXPECT_FALSE(MockTokenSource::Create(o).ok());
  o.vocab_size = 10;
  o.num_documents = 0;
  EXPECT_FALSE(MockTokenSource::Create(o).ok());
  o.num_documents = 1;
  o.min_document_length = 10;
  o.max_document_length = 5;
  EXPECT_FALSE(MockTokenSource::Create(o).ok());
}

}  // namespace
}  // namespace gtp::data
