// --set overrides of recipes/trainer/config.h: a value equal to the proto
// default (0, false, "") replaces the file's value, like any other.
#include "recipes/trainer/config.h"

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace gtp::recipes {
namespace {

std::string WriteRecipe() {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/recipe.pbtxt";
  std::ofstream out(path);
  out << R"(name: "t"
model { vocab_size: 256 seq_len: 16 n_layer: 2 n_embd: 32 n_head: 4 }
parallel { world_size: 1 }
data { source: "corpus" seed: 1234 }
optim { lr: 1e-3 min_lr: 1e-4 weight_decay: 0.1 clip_grad: 1.0 warmup_steps: 5 }
train { steps: 10 micro_batch: 2 eval_every: 5 }
checkpoint { every: 5 async_save: true }
)";
  return path;
}

TEST(RecipeOverrides, ZeroFalseAndEmptyReplaceTheFileValues) {
  const std::string path = WriteRecipe();
  auto base = LoadRecipe(path, {});
  ASSERT_TRUE(base.ok()) << base.status();
  EXPECT_FLOAT_EQ(base->optim().weight_decay(), 0.1f);  // the file's values arrive
  EXPECT_EQ(base->checkpoint().every(), 5);
  auto r = LoadRecipe(path, {"optim.weight_decay=0", "optim.clip_grad=0", "optim.min_lr=0",
                             "checkpoint.every=0", "train.eval_every=0", "data.seed=0",
                             "checkpoint.async_save=false", "optim.warmup_steps=0"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->optim().weight_decay(), 0.0f);
  EXPECT_EQ(r->optim().clip_grad(), 0.0f);
  EXPECT_EQ(r->optim().min_lr(), 0.0f);
  EXPECT_EQ(r->checkpoint().every(), 0);
  EXPECT_EQ(r->train().eval_every(), 0);
  EXPECT_EQ(r->data().seed(), 0u);
  EXPECT_FALSE(r->checkpoint().async_save());
  EXPECT_EQ(r->optim().warmup_steps(), 0);
  // Untouched settings keep the file's values.
  EXPECT_FLOAT_EQ(r->optim().lr(), 1e-3f);
  EXPECT_EQ(r->model().n_head(), 4);
}

TEST(RecipeOverrides, ZeroWhereZeroIsInvalidIsAnErrorNamingTheSetting) {
  const std::string path = WriteRecipe();
  auto r = LoadRecipe(path, {"model.n_head=0"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("model.n_head"), std::string::npos)
      << r.status();
  auto s = LoadRecipe(path, {"data.source="});  // empty: the default (corpus)
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->data().source(), "corpus");
}

}  // namespace
}  // namespace gtp::recipes
