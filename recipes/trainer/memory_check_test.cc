#include "recipes/trainer/memory_check.h"

#include <string>

#include "gtest/gtest.h"
#include "recipes/trainer/mfu.h"

namespace gtp::recipes {
namespace {

proto::Recipe Gpt(int64_t n_layer, int64_t n_embd, const std::string& device) {
  proto::Recipe r;
  auto* m = r.mutable_model();
  m->set_vocab_size(50304);
  m->set_seq_len(1024);
  m->set_n_layer(n_layer);
  m->set_n_embd(n_embd);
  m->set_n_head(12);
  r.mutable_train()->set_device(device);
  return r;
}

constexpr double kGiB = 1 << 30;

// GPT-2 124M (V=50304) has 123.7e6 non-position parameters (mfu_test):
// 16 bytes each is 1.98e9 bytes = 1.84 GiB.
TEST(CheckModelFits, RefusesByTheLowerBoundAndNamesTheFigures) {
  const proto::Recipe gpt2 = Gpt(12, 768, "cuda");
  MemoryCapacity one_gib{/*host=*/64 * kGiB, /*device=*/1 * kGiB, /*local_ranks=*/1};
  absl::Status st = CheckModelFits(gpt2, /*world=*/1, one_gib);
  ASSERT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  const std::string msg(st.message());
  EXPECT_NE(msg.find("model.n_layer=12, model.n_embd=768"), std::string::npos) << msg;
  EXPECT_NE(msg.find("about 1.24e+08 parameters"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1.84 GiB on the busiest GPU, more than the 1 GiB of one GPU"), std::string::npos) << msg;
  // Spread over 4 ranks the bound is 0.46 GiB per GPU: not refused.
  EXPECT_TRUE(CheckModelFits(gpt2, 4, one_gib).ok());
  // Unknown capacity: not checked.
  EXPECT_TRUE(CheckModelFits(gpt2, 1, MemoryCapacity{}).ok());
}

TEST(CheckModelFits, AnAbsurdWidthIsRefusedWithoutOverflow) {
  // C = 4e9: C² = 1.6e19 overflows int64; the estimate is in double.
  const proto::Recipe huge = Gpt(2, 4000000000LL, "cpu");
  MemoryCapacity host{/*host=*/24 * kGiB, /*device=*/0, /*local_ranks=*/1};
  absl::Status st = CheckModelFits(huge, 1, host);
  ASSERT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(std::string(st.message()).find("of memory it has"), std::string::npos) << st;
  // On CPU the ranks of one machine share its memory: 4 local ranks of a
  // world of 4 need the whole model's bound there.
  const proto::Recipe gpt2 = Gpt(12, 768, "cpu");
  EXPECT_FALSE(CheckModelFits(gpt2, 4, MemoryCapacity{1.5 * kGiB, 0, 4}).ok());
  EXPECT_TRUE(CheckModelFits(gpt2, 4, MemoryCapacity{1.5 * kGiB, 0, 1}).ok());
}

TEST(NonPositionParamsApprox, EqualsTheExactCountWhereThatFits) {
  ModelShape s = ShapeOf(Gpt(12, 768, "cpu").model());
  EXPECT_EQ(NonPositionParamsApprox(s), static_cast<double>(NonPositionParams(s)));
  s.swiglu = true;
  s.n_kv_head = 4;
  s.ffn_hidden = 2048;
  EXPECT_EQ(NonPositionParamsApprox(s), static_cast<double>(NonPositionParams(s)));
}

}  // namespace
}  // namespace gtp::recipes
