// recipes/vlm_mimo — a vision-language model trained with heterogeneous
// MIMO parallelism on the synthetic shapes task (data/shapes): a ViT-style
// encoder on one rank grid, a GPT on another, joined by the bridge (mimo/).
//
//   bazel run //recipes/vlm_mimo:train                  # CPU, 8 in-process ranks:
//                                                       # encoder TP1·DP4 on 0–3 |
//                                                       # language TP2·GTP2 on 4–7
//   bazel run //recipes/vlm_mimo:train -- --colocated --language_ranks=8 --encoder_ranks=8
//
// The ranks are threads (comm/local); under tools/gtprun processes (UCX on
// the CPU; on GPUs, --device=cuda, NCCL with the bridge moving device
// memory), set up by the GPT trainer's world (recipes/trainer/world.h):
//
//   gtprun --nproc 2 -- train --device=cuda --encoder_ranks=1 --language_ranks=1
//       --language_tp=1 --language_gtp=1        (one line: disjoint 1 + 1 on NCCL)
//
// Logs the loss (the mean over the language lanes) every --log_every steps;
// at the end greedily captions --eval_batches batches of unseen
// (validation-split) images and prints the caption accuracy and examples.
// Flags only for now (no recipe .pbtxt: the GPT trainer's config does not
// describe two modules yet).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "comm/env/launch_env.h"
#include "comm/host_values.h"
#include "core/allocator.h"
#include "core/status.h"
#include "data/shapes/shapes.h"
#include "layers/linear.h"
#include "mimo/checkpoint.h"
#include "mimo/model.h"
#include "mimo/optimizer.h"
#include "parallel/hyper_comm_grid.h"
#include "recipes/trainer/world.h"

ABSL_FLAG(int, steps, 600, "optimizer steps");
ABSL_FLAG(int, global_batch, 16, "samples per step (defined on the language grid)");
ABSL_FLAG(double, lr, 1e-2, "peak learning rate (cosine to lr/10, 20 warmup steps)");
ABSL_FLAG(bool, muon, true,
          "Muon for the matrices of both modules (else AdamW, which on this task stays at the "
          "image-blind loss for hundreds of steps)");
ABSL_FLAG(int, log_every, 25, "log every N steps");
ABSL_FLAG(int, eval_batches, 4, "validation batches captioned at the end");
ABSL_FLAG(int, encoder_ranks, 4, "ranks of the encoder grid (first)");
ABSL_FLAG(int, encoder_tp, 1, "encoder TP");
ABSL_FLAG(int, encoder_gtp, 1, "encoder GTP");
ABSL_FLAG(int, language_ranks, 4, "ranks of the language grid (after the encoder's)");
ABSL_FLAG(int, language_tp, 2, "language TP");
ABSL_FLAG(int, language_gtp, 2, "language GTP");
ABSL_FLAG(bool, colocated, false, "both modules on the same ranks (encoder_ranks = language_ranks)");
ABSL_FLAG(int, image_size, 16, "image side in pixels");
ABSL_FLAG(int, patch, 4, "patch side");
ABSL_FLAG(int, width, 64, "model width of both modules");
ABSL_FLAG(int, layers, 2, "transformer layers of each module");
ABSL_FLAG(uint64_t, seed, 1234, "data and init seed");
ABSL_FLAG(std::string, checkpoint_dir, "", "save a checkpoint here at the end (and resume from it)");
ABSL_FLAG(std::string, device, "cpu",
          "cpu, or cuda: one GPU, both modules on one rank (--colocated --encoder_ranks=1 "
          "--language_ranks=1 --language_tp=1 --language_gtp=1 --encoder_tp=1)");

namespace gtp::recipes {
namespace {

using data::shapes::ShapesTask;

parallel::ParallelConfig Dense(int tp, int gtp) {
  parallel::ParallelConfig pc;
  pc.tp = tp;
  pc.tp_num_weight_shards = tp * gtp;
  return pc;
}

optimizer::OptimizerConfig Optim(int steps) {
  optimizer::OptimizerConfig o;
  if (absl::GetFlag(FLAGS_muon)) o.matrices = optimizer::MatrixOptimizer::kMuon;
  o.lr.decay = optimizer::LrDecay::kCosine;
  o.lr.max_lr = static_cast<float>(absl::GetFlag(FLAGS_lr));
  o.lr.min_lr = o.lr.max_lr / 10;
  o.lr.warmup_steps = std::min(20, steps);
  o.lr.decay_steps = steps;
  o.clip_grad = 1.0;
  o.adamw.beta2 = 0.95f;
  o.adamw.weight_decay = 0.01f;
  return o;
}

// Per row of the language model's last logits: the argmax over the real
// vocabulary across the TP group (every TP rank gets the same answer).
absl::StatusOr<std::vector<int32_t>> Argmax(const kernels::Exec& e, layers::GptModel& lm,
                                            comm::Communicator& tp) {
  const int64_t rows = lm.logits().dim(0), cols = lm.logits().dim(1);
  const std::vector<float> logits = layers::DeviceToHost<float>(e, lm.logits());
  std::vector<float> mine(rows * 2), all(rows * 2 * tp.size());
  for (int64_t r = 0; r < rows; ++r) {
    float best = -INFINITY;
    int64_t arg = -1;
    for (int64_t c = 0; c < lm.vocab_local(); ++c) {
      const float v = logits[r * cols + c];
      if (v > best) best = v, arg = lm.vocab_start() + c;
    }
    mine[2 * r] = best;
    mine[2 * r + 1] = static_cast<float>(arg);
  }
  GTP_RETURN_IF_ERROR(
      comm::AllGatherHost(tp, mine.data(), all.data(), rows * 2, DType::kF32, {e.alloc, e.stream}));
  std::vector<int32_t> out(rows);
  for (int64_t r = 0; r < rows; ++r) {
    float best = -INFINITY;
    for (int t = 0; t < tp.size(); ++t) {
      const float v = all[(t * rows + r) * 2];
      if (all[(t * rows + r) * 2 + 1] >= 0 && v > best) {
        best = v;
        out[r] = static_cast<int32_t>(all[(t * rows + r) * 2 + 1]);
      }
    }
  }
  return out;
}

absl::Status Run() {
  const bool colocated = absl::GetFlag(FLAGS_colocated);
  const int ne = absl::GetFlag(FLAGS_encoder_ranks), nl = absl::GetFlag(FLAGS_language_ranks);
  if (colocated && ne != nl) {
    return absl::InvalidArgumentError("--colocated needs --encoder_ranks == --language_ranks");
  }
  const int world = colocated ? nl : ne + nl;
  const int steps = absl::GetFlag(FLAGS_steps), log_every = absl::GetFlag(FLAGS_log_every);
  const int64_t G = absl::GetFlag(FLAGS_global_batch);
  GTP_ASSIGN_OR_RETURN(const ShapesTask task,
                       ShapesTask::Create({absl::GetFlag(FLAGS_image_size), absl::GetFlag(FLAGS_patch),
                                           absl::GetFlag(FLAGS_seed)}));
  const int64_t C = absl::GetFlag(FLAGS_width), L = absl::GetFlag(FLAGS_layers);
  mimo::MimoConfig mc;
  mc.encoder.patch_dim = task.patch_dim();
  mc.encoder.num_patches = task.num_patches();
  mc.encoder.n_layer = static_cast<int>(L);
  mc.encoder.block.n_embd = C;
  mc.encoder.block.n_head = 4;
  mc.encoder.block.seed = absl::GetFlag(FLAGS_seed);
  mc.language = layers::GptConfig::Gpt2(ShapesTask::vocab_size(), task.sequence_length(),
                                        static_cast<int>(L), C, 4);
  mc.language.block.seed = absl::GetFlag(FLAGS_seed) + 1;
  const std::string device = absl::GetFlag(FLAGS_device);
  if (device != "cuda" && device != "cpu") {
    return absl::InvalidArgumentError("--device must be cpu or cuda");
  }
  // The ranks: threads of this process (comm/local) on the CPU; under a
  // launcher (tools/gtprun) one process each — UCX on the CPU, NCCL (with
  // UCX beside it for host traffic) on GPUs — as the GPT trainer does.
  proto::Recipe recipe;
  recipe.mutable_train()->set_device(device);
  recipe.mutable_train()->set_precision("f32");
  recipe.mutable_train()->set_attention("flash");
  recipe.mutable_parallel()->set_world_size(world);
  if (UnderLauncher(recipe)) {
    GTP_ASSIGN_OR_RETURN(comm::LaunchEnv env, comm::ReadLaunchEnv());
    if (env.world_size != world) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the launcher started ", env.world_size, " processes but the layout needs ", world,
          " (--encoder_ranks=", ne, colocated ? " colocated with " : " + ", "--language_ranks=", nl,
          "): launch ", world));
    }
  } else if (device == "cuda" && world != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--device=cuda with ", world, " ranks needs one process per rank: tools/gtprun --nproc ",
        world, " -- <this binary> ... (or one rank: --colocated --encoder_ranks=1 "
        "--language_ranks=1 --encoder_tp=1 --language_tp=1 --language_gtp=1)"));
  }
  std::mutex mu;
  return RunOnRanks(recipe, [&](const RankWorld& rw) -> absl::Status {
    comm::Communicator& w = rw.world;
    const kernels::Exec& e = rw.exec;
    HeapAllocator host;
    if (w.rank() == 0) {
      std::printf("vlm_mimo: %d ranks (%s): encoder tp=%d gtp=%d on %d ranks %s language tp=%d "
                  "gtp=%d on %d ranks; %lld samples/step, %d steps, %s\n",
                  world, w.backend().c_str(), absl::GetFlag(FLAGS_encoder_tp),
                  absl::GetFlag(FLAGS_encoder_gtp), ne, colocated ? "(colocated with)" : "|",
                  absl::GetFlag(FLAGS_language_tp), absl::GetFlag(FLAGS_language_gtp), nl,
                  static_cast<long long>(G), steps, absl::GetFlag(FLAGS_muon) ? "Muon" : "AdamW");
      std::fflush(stdout);
    }
    GTP_ASSIGN_OR_RETURN(auto eg, parallel::HyperCommGrid::Create(
                                      "vision", Dense(absl::GetFlag(FLAGS_encoder_tp),
                                                      absl::GetFlag(FLAGS_encoder_gtp)),
                                      0, ne, w));
    GTP_ASSIGN_OR_RETURN(auto lg, parallel::HyperCommGrid::Create(
                                      "language", Dense(absl::GetFlag(FLAGS_language_tp),
                                                        absl::GetFlag(FLAGS_language_gtp)),
                                      colocated ? 0 : ne, nl, w));
    const int D = lg.num_data_lanes();
    if (G % D != 0) {
      return absl::InvalidArgumentError(absl::StrCat("--global_batch ", G, " is not divisible by the ",
                                                     D, " language data lanes"));
    }
    GTP_ASSIGN_OR_RETURN(auto model, mimo::MimoModel::Create(mc, eg, lg, w, G / D,
                                                             task.sequence_length(), e, host));
    GTP_ASSIGN_OR_RETURN(auto opt, mimo::MimoOptimizer::Create(*model, w, e, Optim(steps), Optim(steps)));
    // The rank that prints: language lane 0, TP rank 0.
    const bool printer = w.rank() == lg.offset();
    comm::Communicator* tp = nullptr;
    if (model->has_language()) {
      GTP_ASSIGN_OR_RETURN(tp, lg.Get(parallel::groups::kTp));
    }
    // Lane leaders add their lane's loss to the world's mean.
    GTP_ASSIGN_OR_RETURN(const std::vector<int> leaders, lg.LaneLeaders(0));
    const bool lane_leader =
        std::find(leaders.begin(), leaders.end(), w.rank()) != leaders.end();
    const std::string ckpt = absl::GetFlag(FLAGS_checkpoint_dir);
    int first = 0;
    if (!ckpt.empty() && checkpoint::LatestIteration(ckpt).ok()) {
      GTP_ASSIGN_OR_RETURN(auto lr,
                           mimo::LoadMimoCheckpoint(ckpt, std::nullopt, *model, *opt, rw.host));
      first = static_cast<int>(lr.iteration);
      if (printer) std::printf("resumed from %s at step %d\n", ckpt.c_str(), first);
    }
    // One micro-batch of split `split` starting at global sample `base`.
    auto forward = [&](data::shapes::Split split, int64_t base, bool train,
                       std::vector<int32_t>* tokens_host) -> absl::Status {
      Tensor patches, tokens, targets;
      std::vector<int64_t> enc_ids, lang_ids;
      if (model->has_encoder()) {
        const auto r = model->EncoderSamples();
        const auto b = task.MakeBatch(split, base + r.first, r.count);
        patches = layers::TensorFromHost(e, b.patches.data(),
                                         {r.count * task.num_patches(), task.patch_dim()}, DType::kF32);
        enc_ids = b.ids;
      }
      if (model->has_language()) {
        const auto r = model->LanguageSamples();
        const auto b = task.MakeBatch(split, base + r.first, r.count);
        if (tokens_host != nullptr && tokens_host->empty()) *tokens_host = b.tokens;
        tokens = layers::HostToDevice(e, tokens_host ? *tokens_host : b.tokens,
                                      {r.count, task.sequence_length()});
        targets = layers::HostToDevice(e, b.targets, {r.count, task.sequence_length()});
        lang_ids = b.ids;
      }
      return model->Forward(patches, tokens, targets, enc_ids, lang_ids, train);
    };
    auto t0 = std::chrono::steady_clock::now();
    for (int step = first; step < steps; ++step) {
      GTP_RETURN_IF_ERROR(forward(data::shapes::kTrain, int64_t{step} * G, true, nullptr));
      opt->StartMicrobatch(true);
      GTP_RETURN_IF_ERROR(model->Backward());
      float loss = 0;
      if (model->has_language()) {
        GTP_ASSIGN_OR_RETURN(loss, model->language()->TakeLossSum());
      }
      GTP_ASSIGN_OR_RETURN(optimizer::StepStats s, opt->Step());
      // The mean over the language lanes (host memory: the host world).
      float mean = lane_leader ? loss / static_cast<float>(D) : 0.0f;
      GTP_RETURN_IF_ERROR(
          comm::Run(rw.host.AllReduce(&mean, &mean, 1, DType::kF32, comm::ReduceOp::kSum)));
      if (printer && ((step + 1) % log_every == 0 || step == first)) {
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
                          (step == first ? 1 : log_every);
        std::printf("step %5d/%d  loss %.6f  lr %.2e  grad-norm %.5f  %.1f ms/step%s\n", step + 1,
                    steps, mean, s.lr, s.grad_norm, ms, s.skipped ? "  (skipped)" : "");
        std::fflush(stdout);
        t0 = std::chrono::steady_clock::now();
      }
    }
    if (!ckpt.empty()) {
      GTP_RETURN_IF_ERROR(mimo::SaveMimoCheckpoint(ckpt, steps, *model, *opt, rw.host));
    }
    // Greedy captions of unseen images: after "<bos> a", each next word is
    // the argmax, fed back (the model is causal: earlier positions keep).
    const int np = task.num_patches(), seq = task.sequence_length();
    // Correct captions, sizes, colours, shapes; captions (from lane leaders).
    float counts[5] = {0, 0, 0, 0, 0};
    std::vector<std::string> examples;
    for (int bi = 0; bi < absl::GetFlag(FLAGS_eval_batches); ++bi) {
      std::vector<int32_t> tokens;  // this lane's tokens, filled as we decode
      std::vector<int32_t> pred;
      for (int j = 1; j <= ShapesTask::kCaptionLength - 2; ++j) {
        GTP_RETURN_IF_ERROR(forward(data::shapes::kValid, int64_t{bi} * G, false, &tokens));
        if (!model->has_language()) continue;
        GTP_ASSIGN_OR_RETURN(pred, Argmax(e, *model->language(), *tp));
        if (j < ShapesTask::kCaptionLength - 2) {
          for (int64_t b = 0; b * seq < static_cast<int64_t>(tokens.size()); ++b) {
            tokens[b * seq + np + j + 1] = pred[b * seq + np + j];
          }
        }
      }
      if (!model->has_language() || tp->rank() != 0) continue;
      const auto r = model->LanguageSamples();
      for (int64_t b = 0; b < r.count; ++b) {
        const auto truth = task.Make(data::shapes::kValid, bi * G + r.first + b).caption;
        std::vector<int32_t> got = {ShapesTask::kBos, tokens[b * seq + np + 1], tokens[b * seq + np + 2],
                                    tokens[b * seq + np + 3], pred[b * seq + np + 3], ShapesTask::kEos};
        const bool ok = got[1] == truth[1] && got[2] == truth[2] && got[3] == truth[3] && got[4] == truth[4];
        counts[0] += ok;
        for (int k = 0; k < 3; ++k) counts[1 + k] += got[2 + k] == truth[2 + k];
        counts[4] += 1;
        if (printer && examples.size() < 6) {
          examples.push_back(absl::StrCat("  image ", bi * G + r.first + b, ": \"",
                                          ShapesTask::Decode(truth.data(), 6), "\" -> model \"",
                                          ShapesTask::Decode(got.data(), 6), "\"", ok ? "" : "  (wrong)"));
        }
      }
    }
    GTP_RETURN_IF_ERROR(
        comm::Run(rw.host.AllReduce(counts, counts, 5, DType::kF32, comm::ReduceOp::kSum)));
    if (printer) {
      std::lock_guard<std::mutex> g(mu);
      const float n = std::max(1.0f, counts[4]);
      std::printf("captions of %d unseen images: %.1f%% exactly right (chance %.1f%%); size %.1f%% "
                  "(chance 50%%), colour %.1f%% (16.7%%), shape %.1f%% (25%%)\n",
                  static_cast<int>(counts[4]), 100.0 * counts[0] / n, 100.0 / 48,
                  100.0 * counts[1] / n, 100.0 * counts[2] / n, 100.0 * counts[3] / n);
      for (const std::string& s : examples) std::printf("%s\n", s.c_str());
    }
    return absl::OkStatus();
  });
}

}  // namespace
}  // namespace gtp::recipes

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  absl::Status st = gtp::recipes::Run();
  if (!st.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  return 0;
}
