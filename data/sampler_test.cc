#include "data/sampler.h"

#include <algorithm>
#include <set>
#include <vector>

#include "data/corpus.h"
#include "data/gpt_dataset.h"
#include "gtest/gtest.h"

namespace gtp::data {
namespace {

SamplerConfig Config(int64_t gbs, int64_t mbs, int64_t lanes) {
  SamplerConfig c;
  c.global_batch_size = gbs;
  c.micro_batch_size = mbs;
  c.num_lanes = lanes;
  return c;
}

std::vector<DistributedSampler> Lanes(const SamplerConfig& c, SamplerState state = {}) {
  std::vector<DistributedSampler> out;
  for (int64_t l = 0; l < c.num_lanes; ++l) {
    auto s = DistributedSampler::Create(c, l, state);
    EXPECT_TRUE(s.ok()) << s.status();
    out.push_back(*s);
  }
  return out;
}

// The lanes' step samples concatenated in lane order.
std::vector<uint64_t> Concatenated(const std::vector<DistributedSampler>& lanes) {
  std::vector<uint64_t> out;
  for (const auto& s : lanes) {
    std::vector<uint64_t> v = s.StepSamples();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

TEST(DistributedSampler, LanesAreDisjointAndCoverTheGlobalBatch) {
  SamplerConfig c = Config(24, 2, 4);
  auto lanes = Lanes(c);
  EXPECT_EQ(lanes[0].num_micro_batches(), 3);
  for (int step = 0; step < 5; ++step) {
    std::set<uint64_t> all;
    size_t total = 0;
    for (auto& s : lanes) {
      for (int64_t m = 0; m < s.num_micro_batches(); ++m) {
        std::vector<uint64_t> mb = s.MicroBatch(m);
        EXPECT_EQ(mb.size(), 2u);
        all.insert(mb.begin(), mb.end());
        total += mb.size();
      }
    }
    EXPECT_EQ(total, 24u);
    EXPECT_EQ(all.size(), 24u);  // disjoint
    std::vector<uint64_t> global = lanes[0].GlobalBatch();
    EXPECT_EQ(std::vector<uint64_t>(all.begin(), all.end()), global);  // covering
    EXPECT_EQ(global.front(), static_cast<uint64_t>(24 * step));
    for (auto& s : lanes) s.Advance();
  }
}

// Same global batch size → the same samples at every step, whatever the
// number of lanes and micro-batch size, in the same order by lane.
TEST(DistributedSampler, UnionIsIndependentOfTheLaneCount) {
  const int64_t gbs = 32;
  for (int64_t lanes_n : {1, 2, 4, 8, 16}) {
    for (int64_t mbs : {1, 2}) {
      if (gbs % (mbs * lanes_n) != 0) continue;
      auto ref = Lanes(Config(gbs, 32, 1));
      auto lanes = Lanes(Config(gbs, mbs, lanes_n));
      for (int step = 0; step < 6; ++step) {
        ASSERT_EQ(Concatenated(lanes), Concatenated(ref)) << lanes_n << " lanes, step " << step;
        for (auto& s : lanes) s.Advance();
        for (auto& s : ref) s.Advance();
      }
    }
  }
}

TEST(DistributedSampler, ResumeEqualsUninterrupted) {
  SamplerConfig c = Config(12, 3, 2);
  auto run = Lanes(c);
  std::vector<std::vector<uint64_t>> uninterrupted;
  SamplerState saved;
  for (int step = 0; step < 10; ++step) {
    if (step == 4) saved = run[1].state();
    uninterrupted.push_back(run[1].StepSamples());
    for (auto& s : run) s.Advance();
  }
  EXPECT_EQ(saved.consumed_samples, 48u);
  auto resumed = DistributedSampler::Create(c, 1, saved);
  ASSERT_TRUE(resumed.ok());
  EXPECT_EQ(resumed->step(), 4u);
  for (int step = 4; step < 10; ++step) {
    EXPECT_EQ(resumed->StepSamples(), uninterrupted[step]) << "step " << step;
    resumed->Advance();
  }
  // Resuming on another layout continues the same global stream.
  auto wider = Lanes(Config(12, 1, 4), saved);
  auto narrow = Lanes(Config(12, 12, 1), saved);
  EXPECT_EQ(Concatenated(wider), Concatenated(narrow));
  EXPECT_EQ(Concatenated(narrow).front(), 48u);
}

// End to end with a dataset: the tokens two lanes read at a step, lane after
// lane, are the tokens one lane reads.
TEST(DistributedSampler, LanesReadTheSameTokensAsOneLane) {
  GptDatasetOptions o;
  o.seq_length = 32;
  o.seed = 7;
  o.documents = EmbeddedCorpusSplit(CorpusSplit::kTrain);
  auto ds = GptDataset::Create(EmbeddedCorpusSource(), o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  auto read = [&](const std::vector<DistributedSampler>& lanes) {
    std::vector<int32_t> tokens;
    for (const auto& s : lanes) {
      for (int64_t m = 0; m < s.num_micro_batches(); ++m) {
        std::vector<uint64_t> idx = s.MicroBatch(m);
        std::vector<int32_t> tok(idx.size() * 32), tgt(idx.size() * 32);
        ds->GetBatch(idx, tok.data(), tgt.data());
        tokens.insert(tokens.end(), tok.begin(), tok.end());
      }
    }
    return tokens;
  };
  SamplerState at{/*consumed_samples=*/80};
  EXPECT_EQ(read(Lanes(Config(16, 2, 2), at)), read(Lanes(Config(16, 4, 1), at)));
}

TEST(DistributedSampler, RejectsBadConfigs) {
  EXPECT_FALSE(ValidateSamplerConfig(Config(0, 1, 1)).ok());
  EXPECT_FALSE(ValidateSamplerConfig(Config(8, 0, 1)).ok());
  EXPECT_FALSE(ValidateSamplerConfig(Config(8, 1, 0)).ok());
  absl::Status s = ValidateSamplerConfig(Config(10, 2, 4));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("10"), absl::string_view::npos) << s;
  EXPECT_TRUE(ValidateSamplerConfig(Config(16, 2, 4)).ok());
  EXPECT_FALSE(DistributedSampler::Create(Config(16, 2, 4), 4).ok());
  EXPECT_FALSE(DistributedSampler::Create(Config(16, 2, 4), -1).ok());
}

}  // namespace
}  // namespace gtp::data
