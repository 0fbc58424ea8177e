// BatchStager refuses token ids outside the model's vocabulary (they used to
// read a zero embedding row and train on a wrong target, silently): mock
// data drawn from 400 ids for a 256-id model fails on its first batch,
// naming the sample, the id and a vocabulary size that fits; the same data
// with model.vocab_size = 400 stages as it is.
#include "recipes/trainer/batches.h"

#include <string>

#include "data/gpt_dataset.h"
#include "data/mock.h"
#include "gtest/gtest.h"

namespace gtp::recipes {
namespace {

TEST(BatchStager, TokenIdsOutsideTheVocabularyAreRefused) {
  data::MockOptions mo;
  mo.vocab_size = 400;
  mo.num_documents = 8;
  mo.seed = 3;
  auto src = data::MockTokenSource::Create(mo);
  ASSERT_TRUE(src.ok()) << src.status();
  data::GptDatasetOptions o;
  o.seq_length = 16;
  o.seed = 1;
  auto ds = data::GptDataset::Create(*src, o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  HeapAllocator host;
  const kernels::Exec exec = kernels::Exec::Cpu(host);
  for (int64_t vocab : {256, 400}) {
    SCOPED_TRACE(vocab);
    proto::Recipe r;
    r.mutable_model()->set_vocab_size(vocab);
    r.mutable_model()->set_seq_len(16);
    BatchStager stager(r, exec, &*ds, "");
    auto b = stager.Batch(*ds, {0, 1, 2, 3});
    if (vocab == 400) {
      ASSERT_TRUE(b.ok()) << b.status();
      const int32_t* t = b->first.data<int32_t>();
      int32_t top = 0;
      for (int64_t i = 0; i < 4 * 16; ++i) top = std::max(top, t[i]);
      EXPECT_GE(top, 256);  // the 256-id run below really meets such ids
      continue;
    }
    ASSERT_FALSE(b.ok());
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string m(b.status().message());
    EXPECT_NE(m.find("is outside model.vocab_size = 256"), std::string::npos) << m;
    EXPECT_NE(m.find("training sample"), std::string::npos) << m;
    EXPECT_NE(m.find("set model.vocab_size to at least"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace gtp::recipes
