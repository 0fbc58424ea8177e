#include "recipes/trainer/settings.h"

#include <string>

#include "gtest/gtest.h"
#include "recipes/trainer/config.h"

namespace gtp::recipes {
namespace {

TEST(AllSettings, EveryLeafWithItsTypeAndComment) {
  const std::vector<SettingInfo> all = AllSettings();
  auto find = [&](const std::string& key) -> const SettingInfo* {
    for (const SettingInfo& s : all) {
      if (s.key == key) return &s;
    }
    return nullptr;
  };
  const SettingInfo* kv = find("model.n_kv_head");
  ASSERT_NE(kv, nullptr);
  EXPECT_EQ(kv->type, "int64");
  EXPECT_EQ(kv->comment, "0: = n_head");  // a trailing comment
  const SettingInfo* pattern = find("model.layer_pattern");
  ASSERT_NE(pattern, nullptr);
  EXPECT_NE(pattern->comment.find("one symbol per layer"), std::string::npos) << pattern->comment;  // lines above
  const SettingInfo* chunk = find("model.mamba.chunk");  // nested messages are walked
  ASSERT_NE(chunk, nullptr);
  EXPECT_EQ(chunk->comment, "SSD chunk length; 0: 128");
  const SettingInfo* b = find("parallel.pp_boundaries");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->type, "list of int32 (a:b:c)");
  EXPECT_EQ(find("model"), nullptr);  // messages are not settings
  EXPECT_GT(all.size(), 100u);
}

TEST(ClosestSetting, SuggestsTyposOnly) {
  EXPECT_EQ(ClosestSetting("train.stepz"), "train.steps");
  EXPECT_EQ(ClosestSetting("optim.learning_rate"), "");  // too far to be a typo
  EXPECT_EQ(ClosestSetting("model.nlayer"), "model.n_layer");
  // ApplyOverrides says so.
  proto::Recipe r;
  absl::Status st = ApplyOverrides({"train.stepz=3"}, &r);
  EXPECT_NE(std::string(st.message()).find("no such setting (did you mean train.steps?); --list_settings"),
            std::string::npos)
      << st;
}

TEST(SettingsTable, ShowsTheValuesOfARecipe) {
  proto::Recipe r;
  r.mutable_train()->set_steps(42);
  r.mutable_parallel()->add_pp_boundaries(0);
  r.mutable_parallel()->add_pp_boundaries(3);
  r.mutable_model()->set_norm("rmsnorm");
  const std::string t = SettingsTable(r);
  EXPECT_NE(t.find("\ntrain.steps=42  (int64)"), std::string::npos) << t;
  EXPECT_NE(t.find("\nparallel.pp_boundaries=0:3  (list of int32 (a:b:c))"), std::string::npos) << t;
  EXPECT_NE(t.find("\nmodel.norm=\"rmsnorm\"  (string: layernorm | rmsnorm)  \"layernorm\" (default) | "
                   "\"rmsnorm\""),
            std::string::npos)
      << t;
}

// The one list of fixed choices: every key is a setting of config.proto, and
// the config check refuses another word naming them (and the near one).
TEST(Choices, NameRealSettingsAndRefuseOtherWords) {
  const std::vector<SettingInfo> all = AllSettings();
  for (const Choice& c : Choices()) {
    bool found = false;
    for (const SettingInfo& s : all) found |= s.key == c.key && s.type == "string";
    EXPECT_TRUE(found) << c.key << " is no string setting of config.proto";
    EXPECT_GE(c.values.size(), 2u) << c.key;
  }
  EXPECT_EQ(ChoiceError("train.precision", "bf16"), "");
  EXPECT_EQ(ChoiceError("train.steps", "anything"), "");  // no fixed choices
  EXPECT_EQ(ChoiceError("train.precision", "BF16"),
            "train.precision must be f32, bf16 or fp8, got BF16 (did you mean bf16?)");
  EXPECT_EQ(ChoiceError("optim.decay", "cosin"),
            "optim.decay must be cosine, linear or constant, got cosin (did you mean cosine?)");
  EXPECT_EQ(ChoiceError("train.device", "metal"), "train.device must be cpu or cuda, got metal");
  // Through the recipe's own check.
  proto::Recipe r;
  r.mutable_model()->set_vocab_size(256);
  r.mutable_model()->set_seq_len(16);
  r.mutable_model()->set_n_layer(2);
  r.mutable_model()->set_n_embd(32);
  r.mutable_model()->set_n_head(4);
  r.mutable_parallel()->set_world_size(1);
  r.mutable_optim()->set_lr(1e-3f);
  r.mutable_train()->set_steps(10);
  r.mutable_train()->set_micro_batch(2);
  ASSERT_TRUE(ApplyOverrides({"train.cuda_graphs=offf"}, &r).ok());
  absl::Status st = FinalizeRecipe(&r);
  EXPECT_NE(std::string(st.message()).find("train.cuda_graphs must be auto, on or off, got offf (did you mean off?)"),
            std::string::npos)
      << st;
}

}  // namespace
}  // namespace gtp::recipes
