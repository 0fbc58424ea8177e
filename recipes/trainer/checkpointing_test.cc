// ParseSavedProgress: a checkpoint's progress entries are numbers or a
// DataLoss naming the file and the field (std::stoull used to throw: UCX
// ranks aborted, threads said "exception: stoull" and nothing else).
#include "recipes/trainer/checkpointing.h"

#include <map>
#include <string>
#include <tuple>

#include "gtest/gtest.h"
#include "recipes/trainer/config.h"

namespace gtp::recipes {
namespace {

TEST(SavedProgress, NumbersOrANamedDataLoss) {
  std::map<std::string, std::string> extra = {
      {"consumed_samples", "4096"}, {"optimizer_step", "256"}, {"optimizer_skipped", "3"}};
  auto p = ParseSavedProgress(extra, "run/checkpoints/iter_0000256");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->consumed_samples, 4096u);
  EXPECT_EQ(p->optimizer_step, 256);
  EXPECT_EQ(p->optimizer_skipped, 3);
  for (const auto& [key, value, words] :
       {std::tuple<std::string, std::string, std::string>{"consumed_samples", "abc",
                                                          "consumed_samples is 'abc'"},
        {"optimizer_step", "-1", "optimizer_step is '-1'"},
        {"optimizer_skipped", "3x", "optimizer_skipped is '3x'"},
        {"consumed_samples", "99999999999999999999999", "not a whole number"}}) {
    auto bad = extra;
    bad[key] = value;
    auto r = ParseSavedProgress(bad, "run/checkpoints/iter_0000256");
    ASSERT_FALSE(r.ok()) << key << "=" << value;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
    const std::string m(r.status().message());
    EXPECT_NE(m.find("run/checkpoints/iter_0000256/metadata.pb"), std::string::npos) << m;
    EXPECT_NE(m.find(words), std::string::npos) << m;
  }
  auto missing = extra;
  missing.erase("optimizer_step");
  auto r = ParseSavedProgress(missing, "d");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("d/metadata.pb has no optimizer_step"),
            std::string::npos)
      << r.status();
}

proto::Recipe Sched(const std::string& lr = "1e-3") {
  auto r = ParseRecipe(
      "name: \"t\" model { vocab_size: 256 seq_len: 16 n_layer: 2 n_embd: 32 n_head: 4 } "
      "optim { lr: " + lr + " min_lr: 1e-4 warmup_steps: 5 decay: \"cosine\" } "
      "train { steps: 200 micro_batch: 2 }",
      "test");
  EXPECT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(FinalizeRecipe(&*r).ok());
  return *r;
}

TEST(SameSchedule, ExtendingTrainStepsIsRefusedWithTheFix) {
  const proto::Recipe saved = Sched();
  EXPECT_TRUE(SameSchedule(saved, Sched(), "ckpt/iter_0000200").ok());
  // train.steps 200 -> 400 restarts the cosine: LrAt(200) was min_lr, the
  // new schedule gives about half way back up.
  proto::Recipe longer = Sched();
  longer.mutable_train()->set_steps(400);
  absl::Status st = SameSchedule(saved, longer, "ckpt/iter_0000200");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  const std::string msg(st.message());
  EXPECT_NE(msg.find("decay=200"), std::string::npos) << msg;
  EXPECT_NE(msg.find("decay=400"), std::string::npos) << msg;
  EXPECT_NE(msg.find("set optim.decay_steps=200"), std::string::npos) << msg;
  EXPECT_NE(msg.find("optim.override_schedule=true"), std::string::npos) << msg;
  // The fix: the old decay length, train.steps extended.
  longer.mutable_optim()->set_decay_steps(200);
  EXPECT_TRUE(SameSchedule(saved, longer, "ckpt/iter_0000200").ok());
  // A constant rate does not depend on its decay length.
  proto::Recipe flat = Sched(), flat_longer = Sched();
  flat.mutable_optim()->set_decay("constant");
  flat_longer.mutable_optim()->set_decay("constant");
  flat.mutable_optim()->set_warmup_steps(0);
  flat_longer.mutable_optim()->set_warmup_steps(0);
  flat_longer.mutable_train()->set_steps(400);
  EXPECT_TRUE(SameSchedule(flat, flat_longer, "ckpt/iter_0000200").ok());
  // Another peak rate is a different schedule too.
  st = SameSchedule(saved, Sched("2e-3"), "ckpt/iter_0000200");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(std::string(st.message()).find("Drop the override"), std::string::npos) << st;
}

// AdamW's moments resumed as Muon read as a damaged checkpoint ("tensor
// …/momentum is not in …").
TEST(SameOptimizer, AnotherMatrixOptimizerIsNamedWithTheFixes) {
  const proto::Recipe saved = Sched();
  proto::Recipe muon = Sched();
  muon.mutable_optim()->set_matrices("muon");
  EXPECT_TRUE(SameOptimizer(saved, Sched(), "ckpt/iter_0000200").ok());
  const absl::Status st = SameOptimizer(saved, muon, "ckpt/iter_0000200");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "resuming: optim.matrices is adamw in ckpt/iter_0000200 but muon in this run, and the "
            "checkpoint holds adamw's optimizer state: drop the override (optim.matrices=adamw), or "
            "start from its weights with checkpoint.init_from=ckpt/iter_0000200 and another --run_dir");
  // A recipe recorded before the default was filled in means AdamW.
  proto::Recipe old = saved;
  old.mutable_optim()->clear_matrices();
  EXPECT_TRUE(SameOptimizer(old, Sched(), "d").ok());
  EXPECT_FALSE(SameOptimizer(old, muon, "d").ok());
}

}  // namespace
}  // namespace gtp::recipes
