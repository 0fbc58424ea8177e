// --set overrides of recipes/trainer/config.h: a value equal to the proto
// default (0, false, "") replaces the file's value, like any other.
#include "recipes/trainer/config.h"

#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_split.h"
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

TEST(RecipeOptim, OutOfRangeOptimizerAndMoeSettingsAreNamed) {
  // Each used to be accepted: lr=inf trained with every step skipped and
  // saved NaN weights; beta2 1.5, min_lr above lr, clip_grad -1 (no
  // clipping) and capacity_factor -1 (dropless) ran silently.
  const std::string path = WriteRecipe();
  const std::pair<const char*, const char*> bad[] = {
      {"optim.lr=inf", "optim.lr must be a finite number > 0, got inf"},
      {"optim.lr=nan", "optim.lr must be a finite number > 0"},
      {"optim.min_lr=2e-3", "optim.min_lr must be in [0, optim.lr"},
      {"optim.min_lr=-1", "optim.min_lr must be in [0"},
      {"optim.beta2=1.5", "optim.beta2 must be in [0, 1)"},
      {"optim.beta1=-0.1", "optim.beta1 must be in [0, 1)"},
      {"optim.clip_grad=-1", "optim.clip_grad must be a finite number >= 0"},
      {"optim.weight_decay=-0.1", "optim.weight_decay must be a finite number >= 0"},
      {"optim.warmup_steps=-5", "optim.warmup_steps must be >= 0"},
      {"parallel.world_size=-4", "parallel.world_size must be in [1, 65536] (0: 1), got -4"},
      {"parallel.world_size=100000000", "parallel.world_size must be in [1, 65536]"},
      {"model.moe.num_experts=4,model.moe.top_k=2,model.moe.capacity_factor=-1",
       "model.moe.capacity_factor must be a finite number >= 0"},
  };
  for (const auto& [set, text] : bad) {
    std::vector<std::string> overrides;
    for (absl::string_view v : absl::StrSplit(set, ',')) overrides.emplace_back(v);
    auto r = LoadRecipe(path, overrides);
    ASSERT_FALSE(r.ok()) << set;
    EXPECT_NE(std::string(r.status().message()).find(text), std::string::npos)
        << set << ": " << r.status();
  }
  // The edges that are fine: min_lr = lr (constant), beta 0 (the default), clip 0 (off).
  auto ok = LoadRecipe(path, {"optim.min_lr=1e-3", "optim.beta2=0", "optim.clip_grad=0"});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_FLOAT_EQ(ok->optim().beta2(), 0.95f);
}

TEST(RecipeTrain, CudaGraphsAreAutoOnOrOff) {
  // "" used to become "on", which then meant "where possible": an explicit
  // on could not be told from the default and was dropped silently on
  // several ranks. Now the default is auto and on is a requirement
  // (StepRunner::CheckCudaGraphs refuses a run that cannot capture).
  const std::string path = WriteRecipe();
  auto r = LoadRecipe(path, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->train().cuda_graphs(), "auto");
  for (const char* v : {"auto", "on", "off"}) {
    auto ok = LoadRecipe(path, {std::string("train.cuda_graphs=") + v});
    ASSERT_TRUE(ok.ok()) << v << ": " << ok.status();
    EXPECT_EQ(ok->train().cuda_graphs(), v);
  }
  auto bad = LoadRecipe(path, {"train.cuda_graphs=yes"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("train.cuda_graphs must be auto, on or off, got yes"),
            std::string::npos)
      << bad.status();
}

// checkpoint.disable writes no checkpoint, so a setting that asks for one
// is refused, naming both (the test recipe saves asynchronously every 5).
TEST(RecipeCheckpoint, DisableRefusesWhatAsksForACheckpoint) {
  const std::string path = WriteRecipe();
  auto Message = [&](std::vector<std::string> sets) {
    auto r = LoadRecipe(path, sets);
    return r.ok() ? std::string("accepted") : std::string(r.status().message());
  };
  const std::vector<std::string> off = {"checkpoint.disable=true", "checkpoint.every=0",
                                        "checkpoint.async_save=false"};
  EXPECT_EQ(Message(off), "accepted");
  for (const std::string other :
       {"checkpoint.every=10", "checkpoint.save_initial=true", "checkpoint.async_save=true"}) {
    std::vector<std::string> sets = off;
    sets.push_back(other);
    EXPECT_NE(Message(sets).find("checkpoint.disable=true writes no checkpoint, but " +
                                 other.substr(0, other.find('=')) + " asks for one"),
              std::string::npos)
        << other;
  }
}

// train.precision=fp8 (FP8 GEMMs: cuBLASLt on CUDA, the reference GEMMs on
// the CPU) is refused with GEMM rows (micro_batch × seq_len / cp) that are
// not a multiple of 16 (cuBLASLt's rule, kept on the CPU so a CPU run means
// what a GPU run would); the GPU itself (Hopper) is checked when the run
// starts (world.cc).
TEST(RecipeTrain, Fp8NeedsRowsInSixteens) {
  const std::string path = WriteRecipe();
  auto Message = [&](std::vector<std::string> sets) {
    auto r = LoadRecipe(path, sets);
    return r.ok() ? std::string("accepted") : std::string(r.status().message());
  };
  EXPECT_EQ(Message({"train.precision=fp8", "train.device=cpu", "model.seq_len=64"}), "accepted");
  EXPECT_NE(Message({"train.precision=fp8", "train.device=cuda", "model.seq_len=60",
                     "train.micro_batch=2"})
                .find("multiple of 16, got 120"),
            std::string::npos);
  EXPECT_EQ(Message({"train.precision=fp8", "train.device=cuda", "model.seq_len=64",
                     "train.micro_batch=2"}),
            "accepted");
  // train.fp8_wgrad: fp8 (the default under fp8) or bf16, and only with fp8.
  EXPECT_EQ(Message({"train.precision=fp8", "train.device=cpu", "model.seq_len=64",
                     "train.fp8_wgrad=bf16"}),
            "accepted");
  EXPECT_NE(Message({"train.device=cpu", "train.fp8_wgrad=bf16"})
                .find("train.fp8_wgrad=bf16 applies to train.precision=fp8 only, got precision f32"),
            std::string::npos);
  EXPECT_NE(Message({"train.precision=fp8", "train.device=cpu", "model.seq_len=64",
                     "train.fp8_wgrad=e4m3"})
                .find("train.fp8_wgrad must be fp8 or bf16, got e4m3"),
            std::string::npos);
  // train.fp8_gemm: cublaslt (the default under fp8) or wgmma, fp8 on CUDA only.
  EXPECT_EQ(Message({"train.precision=fp8", "train.device=cuda", "model.seq_len=64",
                     "train.micro_batch=2", "train.fp8_gemm=wgmma"}),
            "accepted");
  EXPECT_NE(
      Message({"train.device=cuda", "train.fp8_gemm=wgmma"})
          .find("train.fp8_gemm=wgmma applies to train.precision=fp8 only, got precision bf16"),
      std::string::npos);
  EXPECT_NE(Message({"train.precision=fp8", "train.device=cpu", "model.seq_len=64",
                     "train.fp8_gemm=wgmma"})
                .find("train.fp8_gemm=wgmma runs on CUDA only"),
            std::string::npos);
  EXPECT_NE(Message({"train.precision=fp8", "train.device=cuda", "model.seq_len=64",
                     "train.micro_batch=2", "train.fp8_gemm=cutlass"})
                .find("train.fp8_gemm must be cublaslt or wgmma, got cutlass"),
            std::string::npos);
  // train.fp8_bf16_first_layers / _last_layers: with fp8 only, >= 0, and
  // together at most model.n_layer (2 here; both layers in bf16 is allowed,
  // as Megatron-LM allows it).
  EXPECT_EQ(Message({"train.precision=fp8", "train.device=cpu", "model.seq_len=64",
                     "train.fp8_bf16_first_layers=1", "train.fp8_bf16_last_layers=1"}),
            "accepted");
  EXPECT_NE(Message({"train.device=cpu", "train.fp8_bf16_first_layers=1"})
                .find("train.fp8_bf16_first_layers=1 applies to train.precision=fp8 only, got "
                      "precision f32"),
            std::string::npos);
  EXPECT_NE(Message({"train.precision=fp8", "train.device=cpu", "model.seq_len=64",
                     "train.fp8_bf16_last_layers=-1"})
                .find("train.fp8_bf16_last_layers must be >= 0"),
            std::string::npos);
  EXPECT_NE(Message({"train.precision=fp8", "train.device=cpu", "model.seq_len=64",
                     "train.fp8_bf16_first_layers=2", "train.fp8_bf16_last_layers=1"})
                .find("train.fp8_bf16_first_layers (2) + train.fp8_bf16_last_layers (1) exceed "
                      "model.n_layer (2)"),
            std::string::npos);
  // NVFP4 gathers: on the CPU under any precision; on cuda under bf16 only,
  // the precision their NCCL cells ran at (an H100, 2026-12-07).
  EXPECT_EQ(Message({"parallel.gtp_gather_dtype=nvfp4", "train.device=cpu"}), "accepted");
  EXPECT_EQ(Message({"parallel.gtp_gather_dtype=nvfp4", "train.device=cuda"}), "accepted");
  EXPECT_NE(Message({"parallel.gtp_gather_dtype=nvfp4", "train.device=cuda",
                     "train.precision=f32"})
                .find("parallel.gtp_gather_dtype=nvfp4 on cuda runs under train.precision=bf16"),
            std::string::npos);
  EXPECT_NE(Message({"parallel.gtp_gather_dtype=nvfp4", "train.device=cuda",
                     "train.precision=fp8", "model.seq_len=64", "train.micro_batch=2"})
                .find("got fp8; use bf16"),
            std::string::npos);
  // A gather dtype must name the params' dtype, bf16 under fp8.
  EXPECT_NE(Message({"train.precision=fp8", "train.device=cuda", "model.seq_len=64",
                     "parallel.gtp_gather_dtype=f32"})
                .find("fp8, nvfp4, fp8_tiles or the params' dtype (bf16), got f32"),
            std::string::npos);
  // FP8 tile gathers: under train.precision=fp8 only, on the CPU and on cuda
  // (their NCCL cells passed on an H100, 2026-12-07).
  EXPECT_EQ(Message({"train.precision=fp8", "train.device=cpu", "model.seq_len=64",
                     "parallel.gtp_gather_dtype=fp8_tiles"}),
            "accepted");
  EXPECT_NE(Message({"train.device=cpu", "parallel.gtp_gather_dtype=fp8_tiles"})
                .find("parallel.gtp_gather_dtype=fp8_tiles gathers the FP8 GEMMs' weights as "
                      "their own 128x128 tiles: it needs train.precision=fp8, got f32"),
            std::string::npos);
  EXPECT_EQ(Message({"train.precision=fp8", "train.device=cuda", "model.seq_len=64",
                     "parallel.gtp_gather_dtype=fp8_tiles"}),
            "accepted");
}

// checkpoint.dir is inside the run directory: an absolute path (which used
// to land nested under the run dir) and a way out of it are refused.
TEST(RecipeCheckpoint, DirMustStayInsideTheRunDir) {
  const std::string path = WriteRecipe();
  for (const char* dir : {"checkpoint.dir=/tmp/ck", "checkpoint.dir=../elsewhere", "checkpoint.dir=a/../../b"}) {
    auto bad = LoadRecipe(path, {dir});
    ASSERT_FALSE(bad.ok()) << dir;
    EXPECT_NE(std::string(bad.status().message()).find("checkpoint.dir is a path inside the run directory"),
              std::string::npos)
        << bad.status();
  }
  for (const char* dir : {"checkpoint.dir=ck", "checkpoint.dir=a/b", "checkpoint.dir=x..y"}) {
    auto ok = LoadRecipe(path, {dir});
    EXPECT_TRUE(ok.ok()) << dir << ": " << ok.status();
  }
  auto keep = LoadRecipe(path, {"checkpoint.keep_last=-1"});
  ASSERT_FALSE(keep.ok());
  EXPECT_NE(std::string(keep.status().message()).find("checkpoint.keep_last must be >= 0"), std::string::npos)
      << keep.status();
}

TEST(RecipeData, TokenizerFilesGoTogetherWithAnIndexedDataset) {
  const std::string path = WriteRecipe();
  const std::string indexed = "data.source=indexed", at = "data.path=/d/owt";
  auto r = LoadRecipe(path, {indexed, at, "data.tokenizer_vocab=/d/vocab.json",
                             "data.tokenizer_merges=/d/merges.txt"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->data().tokenizer_vocab(), "/d/vocab.json");
  EXPECT_EQ(r->data().tokenizer_merges(), "/d/merges.txt");
  auto half = LoadRecipe(path, {indexed, at, "data.tokenizer_vocab=/d/vocab.json"});
  ASSERT_FALSE(half.ok());
  EXPECT_NE(std::string(half.status().message()).find("go together"), std::string::npos);
  auto corpus = LoadRecipe(path, {"data.tokenizer_vocab=v", "data.tokenizer_merges=m"});
  ASSERT_FALSE(corpus.ok());
  EXPECT_NE(std::string(corpus.status().message()).find("indexed"), std::string::npos);
}

TEST(RecipeData, TokenizerJsonIsOneTokenizerOfAnIndexedDataset) {
  const std::string path = WriteRecipe();
  const std::string indexed = "data.source=indexed", at = "data.path=/d/owt";
  auto r = LoadRecipe(path, {indexed, at, "data.tokenizer_json=/d/tokenizer.json"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->data().tokenizer_json(), "/d/tokenizer.json");
  auto both = LoadRecipe(path, {indexed, at, "data.tokenizer_json=/d/tokenizer.json",
                                "data.tokenizer_vocab=/d/vocab.json", "data.tokenizer_merges=/d/merges.txt"});
  ASSERT_FALSE(both.ok());
  EXPECT_NE(std::string(both.status().message())
                .find("data.tokenizer_json and data.tokenizer_vocab/merges both name"),
            std::string::npos)
      << both.status();
  auto corpus = LoadRecipe(path, {"data.tokenizer_json=/d/tokenizer.json"});
  ASSERT_FALSE(corpus.ok());
  EXPECT_NE(std::string(corpus.status().message())
                .find("data.tokenizer_json describes an indexed dataset (data.source indexed)"),
            std::string::npos)
      << corpus.status();
}

// data.tokenizer_model (a SentencePiece tokenizer.model) is a third source:
// one of the three at most, and only for an indexed dataset.
TEST(RecipeData, TokenizerModelIsOneTokenizerOfAnIndexedDataset) {
  const std::string path = WriteRecipe();
  const std::string indexed = "data.source=indexed", at = "data.path=/d/owt";
  auto r = LoadRecipe(path, {indexed, at, "data.tokenizer_model=/d/tokenizer.model"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->data().tokenizer_model(), "/d/tokenizer.model");
  auto json = LoadRecipe(path, {indexed, at, "data.tokenizer_model=/d/tokenizer.model",
                                "data.tokenizer_json=/d/tokenizer.json"});
  ASSERT_FALSE(json.ok());
  EXPECT_NE(std::string(json.status().message())
                .find("data.tokenizer_model and data.tokenizer_json both name the dataset's "
                      "tokenizer: set one"),
            std::string::npos)
      << json.status();
  auto bpe = LoadRecipe(path, {indexed, at, "data.tokenizer_model=/d/tokenizer.model",
                               "data.tokenizer_vocab=/d/vocab.json", "data.tokenizer_merges=/d/merges.txt"});
  ASSERT_FALSE(bpe.ok());
  EXPECT_NE(std::string(bpe.status().message())
                .find("data.tokenizer_model and data.tokenizer_vocab/merges both name"),
            std::string::npos)
      << bpe.status();
  auto corpus = LoadRecipe(path, {"data.tokenizer_model=/d/tokenizer.model"});
  ASSERT_FALSE(corpus.ok());
  EXPECT_NE(std::string(corpus.status().message())
                .find("data.tokenizer_model describes an indexed dataset (data.source indexed)"),
            std::string::npos)
      << corpus.status();
}

// data.path without data.source=indexed trained on the embedded corpus,
// the path unread.
TEST(RecipeData, PathNeedsAnIndexedSource) {
  const std::string path = WriteRecipe();
  for (const std::string source : {"corpus", "mock"}) {
    auto r = LoadRecipe(path, {"data.source=" + source, "data.path=/d/owt"});
    ASSERT_FALSE(r.ok()) << source;
    EXPECT_EQ(r.status().message(),
              "data.path is read only with data.source=indexed, and data.source is " + source +
                  ": set data.source=indexed to train on /d/owt, or drop data.path (data.path=)");
  }
  EXPECT_TRUE(LoadRecipe(path, {"data.source=indexed", "data.path=/d/owt"}).ok());
  EXPECT_TRUE(LoadRecipe(path, {"data.path=/d/owt", "data.path="}).ok());
}

TEST(RecipeParallel, CommTimeoutIsSecondsAndZeroKeepsTheBackendDefault) {
  const std::string path = WriteRecipe();
  auto r = LoadRecipe(path, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->parallel().comm_timeout_s(), 0);
  auto ten = LoadRecipe(path, {"parallel.comm_timeout_s=10"});
  ASSERT_TRUE(ten.ok()) << ten.status();
  EXPECT_EQ(ten->parallel().comm_timeout_s(), 10);
  for (const char* bad : {"parallel.comm_timeout_s=-1", "parallel.comm_timeout_s=nan",
                          "parallel.comm_timeout_s=1e9"}) {
    auto b = LoadRecipe(path, {bad});
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_NE(std::string(b.status().message()).find("parallel.comm_timeout_s"), std::string::npos)
        << b.status();
  }
}

// Inputs of tools/fuzz/config_fuzzer (docs/RELIABILITY.md): 2 × parallel.cp
// and parallel.pp × parallel.vpp overflowed int (UBSan: signed integer
// overflow in FinalizeRecipe); they are now errors with the true product.
TEST(RecipeParallel, LargeSettingsDoNotOverflow) {
  const std::string path = WriteRecipe();
  auto cp = LoadRecipe(path, {"parallel.cp=1873951409"});
  ASSERT_FALSE(cp.ok());
  EXPECT_NE(std::string(cp.status().message()).find("2 × parallel.cp = 3747902818"), std::string::npos)
      << cp.status();
  auto pp = LoadRecipe(path, {"parallel.pp=65536", "parallel.vpp=65536"});
  ASSERT_FALSE(pp.ok());
  EXPECT_NE(std::string(pp.status().message()).find("parallel.vpp = 4294967296"), std::string::npos)
      << pp.status();
  auto pattern = LoadRecipe(path, {"model.n_layer=0", "model.layer_pattern=*|*", "parallel.pp=65536",
                                   "parallel.vpp=65536"});
  ASSERT_FALSE(pattern.ok());
  EXPECT_NE(std::string(pattern.status().message()).find("for 4294967296 stages"), std::string::npos)
      << pattern.status();
}

// parallel.order / parallel.expert_order (issue 28): "" is the default, any
// permutation of the six axes is taken as given, anything else is refused
// naming the setting and a value that works.
TEST(RecipeParallel, RankOrdersArePermutationsOfTheAxes) {
  const std::string path = WriteRecipe();
  auto r = LoadRecipe(path, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->parallel().order(), "");  // the trainer's default, tp-gtp-cp-ep-dp-pp
  auto moved = LoadRecipe(
      path, {"parallel.order=tp-dp-gtp-cp-ep-pp", "parallel.expert_order=gtp-ep-tp-cp-dp-pp"});
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(moved->parallel().order(), "tp-dp-gtp-cp-ep-pp");
  EXPECT_EQ(moved->parallel().expert_order(), "gtp-ep-tp-cp-dp-pp");
  struct Bad {
    const char* set;
    const char* why;
    const char* works;
  };
  for (const Bad& b : {
           Bad{"parallel.order=tp-tp-gtp-cp-ep-dp-pp", "axis 'tp' appears more than once",
               "the default \"tp-gtp-cp-ep-dp-pp\" works"},
           Bad{"parallel.order=tp-gtp-xp-ep-dp-pp", "unknown axis 'xp'", "tp-gtp-cp-ep-dp-pp"},
           Bad{"parallel.order=tp-gtp-dp", "lacks cp, ep, pp", "tp-gtp-cp-ep-dp-pp"},
           Bad{"parallel.order=tp--gtp-cp-ep-dp-pp", "stray '-'", "tp-gtp-cp-ep-dp-pp"},
           Bad{"parallel.expert_order=tp-cp-ep-gtp-dp", "lacks pp",
               "the default \"tp-cp-ep-gtp-dp-pp\" works"},
           Bad{"parallel.expert_order=TP-cp-ep-gtp-dp-pp", "unknown axis 'TP'",
               "tp-cp-ep-gtp-dp-pp"},
       }) {
    auto bad = LoadRecipe(path, {b.set});
    ASSERT_FALSE(bad.ok()) << b.set;
    const std::string m(bad.status().message());
    const std::string setting(b.set, std::string(b.set).find('='));
    EXPECT_NE(m.find(setting + " '"), std::string::npos) << m;
    EXPECT_NE(m.find(b.why), std::string::npos) << m;
    EXPECT_NE(m.find(b.works), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace gtp::recipes

namespace gtp::recipes {
namespace {

// The validation share of mock and indexed data is a setting (it was a fixed 2 %).
TEST(RecipeData, ValidFractionIsCheckedAndDefaults) {
  const std::string path = WriteRecipe();
  auto mock = LoadRecipe(path, {"data.source=mock"});
  ASSERT_TRUE(mock.ok()) << mock.status();
  EXPECT_FLOAT_EQ(mock->data().valid_fraction(), 0.02f);
  for (const char* bad : {"data.valid_fraction=0.7", "data.valid_fraction=-0.1", "data.valid_fraction=nan"}) {
    auto r = LoadRecipe(path, {"data.source=mock", bad});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(std::string(r.status().message()).find("data.valid_fraction must be in (0, 0.5]"), std::string::npos)
        << r.status();
  }
  auto corpus = LoadRecipe(path, {"data.valid_fraction=0.1"});
  ASSERT_FALSE(corpus.ok());
  EXPECT_NE(std::string(corpus.status().message()).find("the embedded corpus has its own split"), std::string::npos);
}

}  // namespace
}  // namespace gtp::recipes

namespace gtp::recipes {
namespace {

// A negative or non-finite number in any setting is refused (they were taken
// as 0 or the default: train.global_batch=-8 trained with 4,
// model.init_std=nan trained with every step skipped and exited 0).
TEST(RecipeNumbers, NegativeOrNonFiniteValuesAreRefused) {
  const std::string path = WriteRecipe();
  for (const char* bad : {"train.global_batch=-8", "model.init_std=nan", "train.eval_batches=-1",
                          "model.rope_theta=-1", "checkpoint.every=-1", "train.peak_tflops=-5"}) {
    auto r = LoadRecipe(path, {bad});
    ASSERT_FALSE(r.ok()) << bad;
    const std::string key = std::string(bad).substr(0, std::string(bad).find('='));
    EXPECT_NE(std::string(r.status().message()).find(key + " must be a finite number >= 0, got "), std::string::npos)
        << r.status();
  }
  EXPECT_TRUE(LoadRecipe(path, {"model.init_std=0.01", "train.eval_batches=0"}).ok());
}

}  // namespace
}  // namespace gtp::recipes

#include "recipes/trainer/typed_config.h"

namespace gtp::recipes {
namespace {

// model.norm_eps reaches every norm of the model (blocks, ln_f, the Mamba
// mixer's gated RMSNorm); 0 is the old fixed 1e-5; a negative one is refused.
TEST(RecipeModel, NormEpsReachesEveryNorm) {
  const std::string path = WriteRecipe();
  auto plain = LoadRecipe(path, {});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FLOAT_EQ(ModelConfig(*plain).block.norm_eps, 1e-5f);
  auto qwen = LoadRecipe(path, {"model.norm_eps=1e-6", "model.layer_pattern=M*-M*-", "model.n_layer=0"});
  ASSERT_TRUE(qwen.ok()) << qwen.status();
  const layers::GptConfig c = ModelConfig(*qwen);
  EXPECT_FLOAT_EQ(c.block.norm_eps, 1e-6f);
  EXPECT_FLOAT_EQ(c.block.mamba.norm_eps, 1e-6f);
  EXPECT_FALSE(LoadRecipe(path, {"model.norm_eps=-1e-6"}).ok());
}

// train.pack_projections: auto (the default), off or on, reaching the model's
// attention; on is refused where packing is not allowed, naming why.
TEST(RecipeTrain, ProjectionPackingIsOffAutoOrOn) {
  const std::string path = WriteRecipe();
  auto r = LoadRecipe(path, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->train().pack_projections(), "auto");
  EXPECT_EQ(ModelConfig(*r).block.packing, layers::ProjectionPacking::kAuto);
  auto off = LoadRecipe(path, {"train.pack_projections=off"});
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(ModelConfig(*off).block.packing, layers::ProjectionPacking::kOff);
  auto on = LoadRecipe(path, {"train.precision=bf16", "train.pack_projections=on"});
  ASSERT_TRUE(on.ok()) << on.status();
  EXPECT_EQ(ModelConfig(*on).block.packing, layers::ProjectionPacking::kOn);
  for (const auto& [sets, why] :
       {std::pair<std::vector<std::string>, std::string>{{"train.pack_projections=on"},
                                                         "train.precision=bf16 (got f32)"},
        {{"train.pack_projections=on", "train.precision=bf16", "parallel.cp=2",
          "parallel.world_size=2"},
         "parallel.cp=1 (got 2)"}}) {
    auto bad = LoadRecipe(path, sets);
    ASSERT_FALSE(bad.ok()) << sets.back();
    EXPECT_NE(std::string(bad.status().message()).find(why), std::string::npos) << bad.status();
  }
  auto bad = LoadRecipe(path, {"train.pack_projections=yes"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(
      std::string(bad.status().message()).find("train.pack_projections must be off, auto or on"),
      std::string::npos)
      << bad.status();
}

}  // namespace
}  // namespace gtp::recipes
