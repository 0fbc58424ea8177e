// A refused run writes nothing: the settings the first step used to find
// out are checked before the run directory exists (Preflight), and a run
// that fails before its first step removes the directory it made. Tiny
// one-rank runs on the CPU, through Train().
#include "recipes/trainer/preflight.h"

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/indexed_dataset.h"
#include "gtest/gtest.h"
#include "recipes/trainer/config.h"
#include "recipes/trainer/trainer.h"

namespace gtp::recipes {
namespace {

namespace fs = std::filesystem;

std::string Tmp(const std::string& name) {
  return std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
}

// One layer, T=16, one rank, 2 steps; `sets` on top.
proto::Recipe Tiny(const std::vector<std::string>& sets = {}) {
  absl::StatusOr<proto::Recipe> r = ParseRecipe(
      "name: \"t\" model { vocab_size: 256 seq_len: 16 n_layer: 1 n_embd: 32 n_head: 2 } "
      "parallel { world_size: 1 } optim { lr: 1e-3 } train { steps: 2 micro_batch: 2 }",
      "test");
  EXPECT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(ApplyOverrides(sets, &*r).ok());
  const absl::Status st = FinalizeRecipe(&*r);
  EXPECT_TRUE(st.ok()) << st;
  return *r;
}

// Train in a new run directory: its error (OK: "") and whether the directory is left.
struct Outcome {
  std::string error;
  bool run_dir_left = false;
};
Outcome TrainIn(const std::string& run_dir, const proto::Recipe& r) {
  RunOptions o;
  o.run_dir = run_dir;
  const absl::Status st = Train(r, o);
  return {std::string(st.message()), fs::exists(run_dir)};
}

// A base run with a checkpoint at step 2 (made once).
std::string BaseCheckpoints() {
  const std::string dir = Tmp("base");
  if (!fs::exists(dir + "/checkpoints/latest")) {
    const Outcome base = TrainIn(dir, Tiny());
    EXPECT_EQ(base.error, "");
  }
  return dir + "/checkpoints";
}

TEST(Preflight, SettingsTheFirstStepUsedToFindAreRefusedBeforeTheRunDirectory) {
  const std::string file = Tmp("a_file");
  std::ofstream(file) << "x";
  const std::string prompt(17, 'x');
  const struct {
    std::vector<std::string> sets;
    std::string error;
  } cases[] = {
      {{"train.dump_tokens=" + Tmp("")}, "train.dump_tokens " + Tmp("") + ": is a directory"},
      {{"train.dump_tokens=" + Tmp("no/dir/t.bin")},
       "its directory " + Tmp("no/dir") + " does not exist"},
      {{"train.tensorboard_dir=" + file},
       "train.tensorboard_dir " + file + ": " + file + " is not a directory"},
      {{"train.tensorboard_dir=" + file + "/tb"},
       "train.tensorboard_dir " + file + "/tb: cannot create " + file + "/tb: " + file +
           " is not a directory"},
      {{"train.sample_every=1", "model.moe.num_experts=2"},
       "train.sample_every: MoE and Mamba models cannot be sampled yet"},
      {{"train.sample_every=1", "train.sample_prompt=" + prompt},
       "train.sample_prompt is 17 bytes (a token each) but the model's context (model.seq_len) is "
       "16: "
       "give a prompt of at most 16 bytes"},
  };
  int i = 0;
  for (const auto& c : cases) {
    const std::string run_dir = Tmp("refused_" + std::to_string(i++));
    const Outcome got = TrainIn(run_dir, Tiny(c.sets));
    EXPECT_NE(got.error.find(c.error), std::string::npos) << c.sets[0] << ": " << got.error;
    EXPECT_FALSE(got.run_dir_left) << c.sets[0];
  }
  // The same prompt fits a context of its length.
  EXPECT_TRUE(Preflight(Tiny({"train.sample_every=1", "train.sample_prompt=" + prompt.substr(1)}),
                        RunOptions{Tmp("ok")})
                  .ok());
}

// The tokenizer files a run records (for generate and `ckpt export`) used to
// be recorded unread.
TEST(Preflight, TokenizerFilesMustLoad) {
  const std::string prefix = Tmp("bytes");
  ASSERT_TRUE(
      data::WriteIndexedDataset(prefix, data::IndexDType::kU8,
                                std::vector<std::vector<int32_t>>(60, std::vector<int32_t>(40, 7)))
          .ok());
  const Outcome got =
      TrainIn(Tmp("tokenizer_missing"), Tiny({"data.source=indexed", "data.path=" + prefix,
                                              "data.tokenizer_vocab=" + Tmp("nope.json"),
                                              "data.tokenizer_merges=" + Tmp("nope.txt")}));
  EXPECT_NE(got.error.find("data.tokenizer_vocab/data.tokenizer_merges: "), std::string::npos)
      << got.error;
  EXPECT_NE(got.error.find("nope.json"), std::string::npos) << got.error;
  EXPECT_FALSE(got.run_dir_left);
}

// data.tokenizer_json is loaded like vocab/merges: a file that does not load
// and one with more ids than the model's embedding are refused.
TEST(Preflight, TokenizerJsonMustLoadAndFit) {
  const std::string prefix = Tmp("bytes_json");
  ASSERT_TRUE(
      data::WriteIndexedDataset(prefix, data::IndexDType::kU8,
                                std::vector<std::vector<int32_t>>(60, std::vector<int32_t>(40, 7)))
          .ok());
  const std::string json = "data/tokenizer/testdata/hf_json/llama3_style.json";  // 271 ids
  const std::vector<std::string> indexed = {"data.source=indexed", "data.path=" + prefix};
  auto with = [&](std::vector<std::string> sets) {
    sets.insert(sets.begin(), indexed.begin(), indexed.end());
    return Tiny(sets);
  };
  const Outcome missing =
      TrainIn(Tmp("json_missing"), with({"data.tokenizer_json=" + Tmp("nope.json")}));
  EXPECT_NE(missing.error.find("data.tokenizer_json: "), std::string::npos) << missing.error;
  EXPECT_NE(missing.error.find("nope.json"), std::string::npos) << missing.error;
  EXPECT_FALSE(missing.run_dir_left);
  const Outcome small = TrainIn(Tmp("json_small"), with({"data.tokenizer_json=" + json}));
  EXPECT_NE(small.error.find("data.tokenizer_json " + json +
                             " has 271 token ids but model.vocab_size is 256"),
            std::string::npos)
      << small.error;
  EXPECT_FALSE(small.run_dir_left);
  EXPECT_TRUE(Preflight(with({"data.tokenizer_json=" + json, "model.vocab_size=272"}),
                        RunOptions{Tmp("json_ok")})
                  .ok());
}

// data.tokenizer_model is loaded the same way: a file that does not load (a
// tokenizer.json given as a tokenizer.model) and one with more ids than the
// model's embedding are refused before the run directory exists.
TEST(Preflight, TokenizerModelMustLoadAndFit) {
  const std::string prefix = Tmp("bytes_spm");
  ASSERT_TRUE(
      data::WriteIndexedDataset(prefix, data::IndexDType::kU8,
                                std::vector<std::vector<int32_t>>(60, std::vector<int32_t>(40, 7)))
          .ok());
  const std::string model = "data/tokenizer/testdata/spm/bpe.model";  // 800 pieces
  const std::vector<std::string> indexed = {"data.source=indexed", "data.path=" + prefix};
  auto with = [&](std::vector<std::string> sets) {
    sets.insert(sets.begin(), indexed.begin(), indexed.end());
    return Tiny(sets);
  };
  const Outcome json = TrainIn(
      Tmp("spm_json"), with({"data.tokenizer_model=data/tokenizer/testdata/hf_json/llama3_style.json"}));
  EXPECT_NE(json.error.find("data.tokenizer_model: data/tokenizer/testdata/hf_json/llama3_style.json: "
                            "this is JSON, not a SentencePiece model"),
            std::string::npos)
      << json.error;
  EXPECT_FALSE(json.run_dir_left);
  const Outcome small = TrainIn(Tmp("spm_small"), with({"data.tokenizer_model=" + model}));
  EXPECT_NE(small.error.find("data.tokenizer_model " + model +
                             " has 800 token ids but model.vocab_size is 256: set "
                             "model.vocab_size=800 or more"),
            std::string::npos)
      << small.error;
  EXPECT_FALSE(small.run_dir_left);
  EXPECT_TRUE(Preflight(with({"data.tokenizer_model=" + model, "model.vocab_size=800"}),
                        RunOptions{Tmp("spm_ok")})
                  .ok());
}

// init_from was opened before the run directory but read after it: a model
// that differs or a damaged metadata.pb left recipe.pbtxt and metrics.jsonl.
TEST(Preflight, InitFromIsReadBeforeTheRunDirectory) {
  const std::string ck = BaseCheckpoints();
  Outcome got = TrainIn(Tmp("other_heads"), Tiny({"checkpoint.init_from=" + ck, "model.n_head=4"}));
  EXPECT_NE(got.error.find("checkpoint.init_from: model.n_head is 2 in " + ck +
                           "/iter_0000002 but 4 in this run"),
            std::string::npos)
      << got.error;
  EXPECT_FALSE(got.run_dir_left);
  got = TrainIn(Tmp("other_layers"), Tiny({"checkpoint.init_from=" + ck, "model.n_layer=2"}));
  EXPECT_NE(got.error.find("model.n_layer is 1"), std::string::npos) << got.error;
  EXPECT_FALSE(got.run_dir_left);
  // One flipped byte of metadata.pb.
  const std::string bad = Tmp("corrupt/checkpoints");
  fs::create_directories(bad);
  fs::copy(ck, bad, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  {
    std::fstream f(bad + "/iter_0000002/metadata.pb",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(20);
    f.put('\xff');
  }
  got = TrainIn(Tmp("init_from_corrupt"), Tiny({"checkpoint.init_from=" + bad}));
  EXPECT_NE(got.error.find("checkpoint.init_from " + bad + ": "), std::string::npos) << got.error;
  EXPECT_NE(got.error.find("metadata.pb is corrupted"), std::string::npos) << got.error;
  EXPECT_FALSE(got.run_dir_left);
  EXPECT_EQ(TrainIn(Tmp("init_from_ok"), Tiny({"checkpoint.init_from=" + ck})).error, "");
}

// Token ids beyond the vocabulary are found by the ranks in the first step,
// after the run directory was made: the run removes it again, but keeps
// what an earlier run left in a directory it did not make.
TEST(Train, AFailureBeforeTheFirstStepLeavesNoRunDirectory) {
  const std::string prefix = Tmp("ids_300");
  ASSERT_TRUE(data::WriteIndexedDataset(
                  prefix, data::IndexDType::kU16,
                  std::vector<std::vector<int32_t>>(60, std::vector<int32_t>(40, 300)))
                  .ok());
  const proto::Recipe r = Tiny({"data.source=indexed", "data.path=" + prefix});
  Outcome got = TrainIn(Tmp("ids"), r);
  EXPECT_NE(got.error.find("token id 300 in training sample"), std::string::npos) << got.error;
  EXPECT_NE(got.error.find("outside model.vocab_size = 256"), std::string::npos) << got.error;
  EXPECT_FALSE(got.run_dir_left);
  const std::string used = Tmp("used");
  fs::create_directories(used);
  std::ofstream(used + "/notes.txt") << "mine";
  got = TrainIn(used, r);
  EXPECT_NE(got.error.find("outside model.vocab_size"), std::string::npos) << got.error;
  EXPECT_TRUE(fs::exists(used + "/notes.txt"));
  EXPECT_TRUE(fs::exists(used + "/metrics.jsonl"));  // not this run's directory to clear
}

// AdamW's moments resumed as Muon read as a damaged checkpoint ("tensor
// …/momentum is not in …").
TEST(Train, ResumingWithAnotherOptimizerIsNamed) {
  const std::string ck = BaseCheckpoints();
  const std::string run = Tmp("muon");
  fs::create_directories(run);
  fs::copy(ck, run + "/checkpoints", fs::copy_options::recursive);
  const Outcome got = TrainIn(run, Tiny({"optim.matrices=muon"}));
  EXPECT_NE(got.error.find("resuming: optim.matrices is adamw in " + run +
                           "/checkpoints/iter_0000002 but "
                           "muon in this run"),
            std::string::npos)
      << got.error;
  EXPECT_NE(got.error.find("drop the override (optim.matrices=adamw)"), std::string::npos)
      << got.error;
}

}  // namespace
}  // namespace gtp::recipes
