// recipes/vlm_mimo — a vision-language model trained with heterogeneous
// MIMO parallelism on the synthetic shapes task (data/shapes): a ViT-style
// encoder on one rank grid, a GPT on another, joined by the bridge (mimo/).
//
//   bazel run -c opt //recipes/vlm_mimo:train      # CPU, 8 in-process ranks:
//                                                  # encoder TP1·DP4 on 0–3 |
//                                                  # language TP2·GTP2 on 4–7
//   bazel run -c opt //recipes/vlm_mimo:train -- --run_dir gtp_runs/vlm2
//       --set parallel.colocated=true                (one line: both on ranks 0–3)
//
// Flags as the GPT recipes' (recipes/trainer/main.h): --config FILE (default
// the recipe's own vlm_mimo.pbtxt; schema vlm_config.proto), --set
// key=value,..., --list_settings, --run_dir DIR (default
// gtp_runs/<name>), --progress. The ranks are threads (comm/local); under
// tools/gtprun processes (UCX on the CPU; on GPUs, train.device=cuda, NCCL
// with the bridge moving device memory), set up by the trainer's world
// (recipes/trainer/world.h):
//
//   gtprun --nproc 2 -- train --set
//   train.device=cuda,parallel.language.tp=1,parallel.language.gtp=1
//       --set parallel.encoder.ranks=1,parallel.language.ranks=1      (one line: NCCL 1 + 1)
//
// The run directory belongs to one run (recipes/trainer/run_lock.h) and gets
// recipe.pbtxt, metrics.jsonl (the GPT trainer's record: step, loss — the
// mean over the language lanes —, lr, grad_norm, ms, tokens_per_s;
// recipes/trainer/metrics.h) and checkpoints (mimo/checkpoint.h) every
// checkpoint.every steps, at the end and on SIGINT/SIGTERM; a run started
// again resumes from its latest checkpoint with the losses it would have
// had. At the end it greedily captions train.eval_batches batches of unseen
// images (captions.h) and prints and records the accuracy.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "checkpoint/checkpoint.h"
#include "comm/env/launch_env.h"
#include "core/allocator.h"
#include "core/cli.h"
#include "core/status.h"
#include "core/user_path.h"
#include "data/shapes/shapes.h"
#include "mimo/checkpoint.h"
#include "mimo/model.h"
#include "mimo/optimizer.h"
#include "parallel/hyper_comm_grid.h"
#include "recipes/trainer/config.h"
#include "recipes/trainer/metrics.h"
#include "recipes/trainer/run_lock.h"
#include "recipes/trainer/settings.h"
#include "recipes/trainer/step_boundary.h"
#include "recipes/trainer/stop_signals.h"
#include "recipes/trainer/world.h"
#include "recipes/vlm_mimo/batches.h"
#include "recipes/vlm_mimo/captions.h"
#include "recipes/vlm_mimo/config.h"

ABSL_FLAG(std::string, config, "",
          "recipe config (protobuf text, schema recipes/vlm_mimo/vlm_config.proto); default: the "
          "recipe's own recipes/vlm_mimo/vlm_mimo.pbtxt");
ABSL_FLAG(
    std::vector<std::string>, set, {},
    "overrides, comma-separated: train.steps=100,optim.lr=1e-3 (may be given several times; all "
    "apply, in order)");
ABSL_FLAG(std::string, run_dir, "", "output directory; default gtp_runs/<name>");
ABSL_FLAG(bool, progress, false,
          "progress bar instead of log lines (default: on when stdout is a terminal)");
ABSL_FLAG(
    bool, list_settings, false,
    "print every --set key with its value in this recipe (after --config/--set), its type and its "
    "comment from recipes/vlm_mimo/vlm_config.proto, then exit");

namespace gtp::recipes::vlm {
namespace {

using data::shapes::ShapesTask;

// One rank's run: set-up, resume, the loop, checkpoints, captions.
class RankRun {
 public:
  RankRun(const VlmRecipe& r, const RunOptions& o, const ShapesTask& task, const RankWorld& rw,
          std::atomic<bool>* has_results)
      : r_(r),
        o_(o),
        task_(task),
        world_(rw.world),
        host_(rw.host),
        e_(rw.exec),
        has_results_(has_results),
        ckpt_root_(o.run_dir + "/" + r.checkpoint().dir()) {}

  absl::Status Run() {
    GTP_RETURN_IF_ERROR(Setup());
    if (rank0()) GTP_RETURN_IF_ERROR(Banner());
    GTP_ASSIGN_OR_RETURN(int64_t step, Resume());
    StopSignals::Defer(true);  // from here a signal stops the run with a checkpoint
    if (rank0()) GTP_RETURN_IF_ERROR(metrics_->ResumeAt(step));
    const int64_t steps = r_.train().steps(), G = r_.train().global_batch();
    const double tokens_per_step = static_cast<double>(G) * task_.sequence_length();
    const int D = lg_->num_data_lanes();
    GTP_ASSIGN_OR_RETURN(const std::vector<int> leaders, lg_->LaneLeaders(0));
    const bool lane_leader =
        std::find(leaders.begin(), leaders.end(), world_.rank()) != leaders.end();
    const int64_t first = step;
    const auto t_start = std::chrono::steady_clock::now();
    while (step < steps) {
      const auto t0 = std::chrono::steady_clock::now();
      GTP_RETURN_IF_ERROR(
          ForwardBatch(*model_, task_, e_, data::shapes::kTrain, step * G, true, nullptr));
      opt_->StartMicrobatch(true);
      GTP_RETURN_IF_ERROR(model_->Backward());
      float loss = 0;
      if (model_->has_language()) {
        GTP_ASSIGN_OR_RETURN(loss, model_->language()->TakeLossSum());
      }
      GTP_ASSIGN_OR_RETURN(optimizer::StepStats s, opt_->Step());
      // The mean over the language lanes (host memory: the host world).
      float mean = lane_leader ? loss / static_cast<float>(D) : 0.0f;
      GTP_RETURN_IF_ERROR(
          comm::Run(host_.AllReduce(&mean, &mean, 1, DType::kF32, comm::ReduceOp::kSum)));
      ++step;
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (rank0()) {
        // comm_exposed_ms is not measured for MIMO (0).
        StepRecord rec{step, mean, s.lr, s.grad_norm, s.skipped, ms, tokens_per_step / (ms / 1e3),
                       0.0};
        GTP_RETURN_IF_ERROR(metrics_->Step(rec, e_.alloc->stats(), world_.size(), t_start, first));
      }
      MarkResults();
      GTP_ASSIGN_OR_RETURN(const StepBoundary b,
                           AtStepBoundary(host_, step, steps, r_.checkpoint().every()));
      if (b.save) GTP_RETURN_IF_ERROR(Save(step, /*announce=*/!b.stop));
      if (b.stop) {
        if (rank0()) PrintStoppedBySignal(step, ckpt_root_);
        return absl::OkStatus();
      }
    }
    StopSignals::Defer(false);
    if (rank0() && o_.progress_bar && first < steps) std::printf("\n");
    const std::string note = "; the run that reached it captioned";
    if (first >= steps) {
      if (rank0()) PrintRunEnd(first, step, steps, ckpt_root_, metrics_->path(), note);
      return absl::OkStatus();
    }
    if (r_.train().eval_batches() > 0) {
      GTP_ASSIGN_OR_RETURN(CaptionScores c, CaptionUnseen(*model_, task_, r_.train().eval_batches(),
                                                          world_, host_, e_));
      if (rank0()) {
        std::printf("%s", FormatScores(c).c_str());
        GTP_RETURN_IF_ERROR(
            metrics_->Values(step, {{"caption_images", static_cast<double>(c.images)},
                                    {"caption_exact", c.exact},
                                    {"caption_size", c.size},
                                    {"caption_colour", c.colour},
                                    {"caption_shape", c.shape}}));
      }
    }
    if (rank0()) PrintRunEnd(first, step, steps, ckpt_root_, metrics_->path(), note);
    return absl::OkStatus();
  }

 private:
  bool rank0() const { return world_.rank() == 0; }
  void MarkResults() { has_results_->store(true); }

  absl::Status Setup() {
    const auto& p = r_.parallel();
    GTP_ASSIGN_OR_RETURN(auto eg, parallel::HyperCommGrid::Create("vision", GridConfig(p.encoder()),
                                                                  0, p.encoder().ranks(), world_));
    GTP_ASSIGN_OR_RETURN(auto lg,
                         parallel::HyperCommGrid::Create("language", GridConfig(p.language()),
                                                         p.colocated() ? 0 : p.encoder().ranks(),
                                                         p.language().ranks(), world_));
    eg_ = std::make_unique<parallel::HyperCommGrid>(std::move(eg));
    lg_ = std::make_unique<parallel::HyperCommGrid>(std::move(lg));
    const int64_t B = r_.train().global_batch() / lg_->num_data_lanes();
    GTP_ASSIGN_OR_RETURN(model_,
                         mimo::MimoModel::Create(MimoConfigOf(r_, task_), *eg_, *lg_, world_, B,
                                                 task_.sequence_length(), e_, host_alloc_));
    GTP_ASSIGN_OR_RETURN(opt_, mimo::MimoOptimizer::Create(*model_, world_, e_, OptimConfigOf(r_),
                                                           OptimConfigOf(r_)));
    // Each module's weights, counted once (by its grid's first rank).
    auto count = [](const optimizer::ParamSet& ps) {
      int64_t n = 0;
      for (auto* p : ps.sharded)
        n += p->global_layout().global_rows * p->global_layout().global_cols;
      return n;
    };
    weights_[0] = world_.rank() == eg_->offset() ? count(opt_->encoder_params()) : 0;
    weights_[1] = world_.rank() == lg_->offset() ? count(opt_->language_params()) : 0;
    GTP_RETURN_IF_ERROR(
        comm::Run(host_.AllReduce(weights_, weights_, 2, DType::kI64, comm::ReduceOp::kSum)));
    if (rank0()) {
      metrics_recipe_ = TrainerRecipe(r_);
      metrics_recipe_.mutable_train()->clear_device();  // no MFU: mfu.h counts one GPT
      GTP_ASSIGN_OR_RETURN(metrics_,
                           Metrics::Open(metrics_recipe_, o_, VlmRecipeText(r_), "recipe.pbtxt"));
    }
    return absl::OkStatus();
  }

  // Rank 0's start-up lines: the layout, the model, the training, the run
  // directory (weights_: counted in Setup).
  absl::Status Banner() {
    const auto& p = r_.parallel();
    const auto& m = r_.model();
    const auto& o = r_.optim();
    auto grid = [](const char* name, const parallel::HyperCommGrid& g) {
      const auto& c = g.config();
      return absl::StrCat(name, " TP ", c.tp, " x GTP ", c.gtp(), " x DP ", c.dp, " on ranks ",
                          g.offset(), "-", g.offset() + g.size() - 1);
    };
    const optimizer::LrSchedule lr = OptimConfigOf(r_).lr;
    std::printf(
        "gtp %s | world %d (%s) | %s | %s%s | data lanes %d -> %d | f32 on %s\n"
        "model: %dx%d images in %dx%d patches (%d), T=%d, vocab %lld | encoder %d + language %d "
        "layers, "
        "C=%lld, heads=%lld | %.3fM + %.3fM weight params\n"
        "train: %lld steps, global batch %lld images, %s lr %.2e (%s to %.2e, warmup %lld), clip "
        "%.2f, seed %llu\n"
        "run dir: %s\n",
        r_.name().c_str(), world_.size(), world_.backend().c_str(), grid("encoder", *eg_).c_str(),
        grid("language", *lg_).c_str(), p.colocated() ? " (colocated)" : "", eg_->num_data_lanes(),
        lg_->num_data_lanes(), r_.train().device().c_str(), m.image_size(), m.image_size(),
        m.patch(), m.patch(), task_.num_patches(), task_.sequence_length(),
        static_cast<long long>(ShapesTask::vocab_size()), m.layers(), m.layers(),
        static_cast<long long>(m.width()), static_cast<long long>(m.heads()), weights_[0] / 1e6,
        weights_[1] / 1e6, static_cast<long long>(r_.train().steps()),
        static_cast<long long>(r_.train().global_batch()), o.matrices().c_str(), lr.max_lr,
        o.decay().c_str(), lr.min_lr, static_cast<long long>(lr.warmup_steps), o.clip_grad(),
        static_cast<unsigned long long>(r_.train().seed()), o_.run_dir.c_str());
    if (metrics_->tensorboard())
      std::printf("tensorboard: %s\n", metrics_->tensorboard()->path().c_str());
    std::fflush(stdout);
    return absl::OkStatus();
  }

  // This run's latest checkpoint (unless checkpoint.no_resume): the step to
  // continue after (0: a fresh run). A damaged `latest` is an error.
  absl::StatusOr<int64_t> Resume() {
    if (r_.checkpoint().no_resume()) {
      if (rank0()) GTP_RETURN_IF_ERROR(SetAsideCheckpoints(ckpt_root_));  // (run_lock.h)
      return 0;
    }
    absl::StatusOr<int64_t> latest = checkpoint::LatestIteration(ckpt_root_);
    if (absl::IsNotFound(latest.status())) return 0;
    GTP_RETURN_IF_ERROR(latest.status());
    const std::string dir = checkpoint::IterationDir(ckpt_root_, *latest);
    GTP_ASSIGN_OR_RETURN(checkpoint::proto::Metadata md, checkpoint::ReadCheckpointMetadata(dir));
    if (auto it = md.extra().find("recipe"); it != md.extra().end()) {
      VlmRecipe theirs;
      GTP_RETURN_IF_ERROR(ParseConfig(it->second, dir + "/metadata.pb (recipe)", &theirs));
      GTP_RETURN_IF_ERROR(CanResume(theirs, r_, dir));
    }
    GTP_ASSIGN_OR_RETURN(auto lr,
                         mimo::LoadMimoCheckpoint(ckpt_root_, *latest, *model_, *opt_, host_));
    if (rank0()) {
      std::printf("resumed from %s at step %lld\n", dir.c_str(),
                  static_cast<long long>(lr.iteration));
    }
    return lr.iteration;
  }

  // Collective; keeps the newest checkpoint.keep_last.
  absl::Status Save(int64_t step, bool announce) {
    GTP_RETURN_IF_ERROR(mimo::SaveMimoCheckpoint(ckpt_root_, step, *model_, *opt_, host_,
                                                 {{"recipe", VlmRecipeText(r_)}},
                                                 r_.checkpoint().keep_last()));
    MarkResults();
    if (!rank0()) return absl::OkStatus();
    if (announce) {
      std::printf("%scheckpoint: step %lld saved to %s\n", o_.progress_bar ? "\n" : "",
                  static_cast<long long>(step), ckpt_root_.c_str());
    }
    return absl::OkStatus();
  }

  const VlmRecipe& r_;
  const RunOptions& o_;
  const ShapesTask& task_;
  comm::Communicator& world_;
  comm::Communicator& host_;
  const kernels::Exec& e_;
  std::atomic<bool>* has_results_;
  const std::string ckpt_root_;
  HeapAllocator host_alloc_;
  std::unique_ptr<parallel::HyperCommGrid> eg_, lg_;
  std::unique_ptr<mimo::MimoModel> model_;
  std::unique_ptr<mimo::MimoOptimizer> opt_;
  int64_t weights_[2] = {0, 0};       // encoder, language
  proto::Recipe metrics_recipe_;      // what metrics_ reads (rank 0)
  std::unique_ptr<Metrics> metrics_;  // rank 0
};

// What can be checked before the run directory exists (a refused run
// writes nothing): the module grids and the batch over them, the world the
// launcher gives, the device.
absl::Status Preflight(const VlmRecipe& r) {
  GTP_RETURN_IF_ERROR(CheckVlmLayout(r));
  const int world = WorldSize(r);
  const proto::Recipe t = TrainerRecipe(r);
  const auto& p = r.parallel();
  const std::string layout = absl::StrCat("parallel.encoder.ranks=", p.encoder().ranks(),
                                          p.colocated() ? " colocated with " : " + ",
                                          "parallel.language.ranks=", p.language().ranks());
  if (UnderLauncher(t)) {
    GTP_ASSIGN_OR_RETURN(comm::LaunchEnv env, comm::ReadLaunchEnv());
    if (env.world_size != world) {
      return absl::InvalidArgumentError(absl::StrCat("the launcher started ", env.world_size,
                                                     " processes but the layout needs ", world,
                                                     " (", layout, "): launch ", world));
    }
  } else if (r.train().device() == "cuda" && world != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("train.device=cuda with ", world, " ranks (", layout,
                     ") needs one process per rank: tools/gtprun --nproc ", world,
                     " -- <this binary> ... (or one rank: --set "
                     "parallel.colocated=true,parallel.encoder.ranks=1,"
                     "parallel.language.ranks=1,parallel.encoder.tp=1,parallel.language.tp=1,"
                     "parallel.language.gtp=1)"));
  }
  return ShapesTask::Create(ShapesConfigOf(r)).status();
}

// The run: start-up checks, the run directory and its lock, the ranks.
absl::Status Train(const VlmRecipe& r, const RunOptions& options) {
  GTP_RETURN_IF_ERROR(Preflight(r));
  GTP_ASSIGN_OR_RETURN(const ShapesTask task, ShapesTask::Create(ShapesConfigOf(r)));
  const proto::Recipe t = TrainerRecipe(r);
  // The run directory, its lock and a failed start's clean-up (run_lock.h).
  return InRunDir(options.run_dir, UnderLauncher(t), [&](std::atomic<bool>& has_results) {
    StopSignals signals;
    return RunOnRanks(t, [&](const RankWorld& w) {
      RankRun run(r, options, task, w, &has_results);
      return run.Run();
    });
  });
}

// The flags of the recipe before it read vlm_config.proto, and their keys.
std::string OldFlag(const std::string& arg) {
  static const std::pair<const char*, const char*> kOld[] = {
      {"steps", "train.steps"},
      {"global_batch", "train.global_batch"},
      {"lr", "optim.lr"},
      {"log_every", "train.log_every"},
      {"eval_batches", "train.eval_batches"},
      {"encoder_ranks", "parallel.encoder.ranks"},
      {"encoder_tp", "parallel.encoder.tp"},
      {"encoder_gtp", "parallel.encoder.gtp"},
      {"language_ranks", "parallel.language.ranks"},
      {"language_tp", "parallel.language.tp"},
      {"language_gtp", "parallel.language.gtp"},
      {"colocated", "parallel.colocated=true"},
      {"image_size", "model.image_size"},
      {"patch", "model.patch"},
      {"width", "model.width"},
      {"layers", "model.layers"},
      {"seed", "train.seed"},
      {"device", "train.device"},
      {"checkpoint_dir", "--run_dir (checkpoints go to <run dir>/checkpoints)"},
  };
  absl::string_view a = arg;
  if (!absl::ConsumePrefix(&a, "--") && !absl::ConsumePrefix(&a, "-")) return "";
  const size_t eq = a.find('=');
  absl::string_view name = a.substr(0, eq),
                    value = eq == absl::string_view::npos ? "" : a.substr(eq + 1);
  const bool no = absl::ConsumePrefix(&name, "no");
  if (name == "muon") {
    const bool adamw = no || value == "false" || value == "0";
    return absl::StrCat(arg, " is now --set optim.matrices=", adamw ? "adamw" : "muon");
  }
  for (const auto& [flag, key] : kOld) {
    if (name != flag) continue;
    if (absl::StrContains(key, "=") || absl::StartsWith(key, "--")) {
      return absl::StrCat(arg, " is now --set ", key);
    }
    return absl::StrCat(arg, " is now --set ", key, "=", value.empty() ? "VALUE" : value);
  }
  return "";
}

int Main(int argc, char** argv) {
  gtp::SetUsage(
      "trains the vision-language MIMO recipe; see recipes/vlm_mimo/train.cc and README.md");
  const std::vector<std::string> sets = TakeSets(&argc, argv);
  for (int i = 1; i < argc && std::string(argv[i]) != "--"; ++i) {
    if (const std::string old = OldFlag(argv[i]); !old.empty()) {
      std::fprintf(stderr,
                   "error: %s (the recipe reads recipes/vlm_mimo/vlm_config.proto like the GPT "
                   "recipes read theirs; --list_settings prints every key)\n",
                   old.c_str());
      return 2;
    }
  }
  const bool progress_given = ProgressFlagGiven(argc, argv);
  const std::vector<char*> positional = gtp::ParseCommandLine(argc, argv);
  if (const std::string stray = StrayArgumentError(positional); !stray.empty()) {
    std::fprintf(stderr, "%s\n", stray.c_str());
    return 1;
  }
  const std::string path = UserPath(absl::GetFlag(FLAGS_config));
  absl::StatusOr<VlmRecipe> r = LoadVlmRecipe(path, sets);
  if (!r.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(r.status().message()).c_str());
    return 1;
  }
  if (absl::GetFlag(FLAGS_list_settings)) {
    std::printf("# --set keys of %s (key=value in this recipe  (type)  comment)\n%s",
                path.empty() ? kDefaultConfigPath : path.c_str(),
                SettingsTable(*r, Schema()).c_str());
    return 0;
  }
  RunOptions options;
  options.run_dir = UserPath(absl::GetFlag(FLAGS_run_dir));
  if (options.run_dir.empty()) {
    const char* wd = std::getenv("BUILD_WORKING_DIRECTORY");  // set by `bazel run`
    options.run_dir = std::string(wd ? wd : ".") + "/gtp_runs/" + r->name();
  }
  options.progress_bar =
      progress_given ? absl::GetFlag(FLAGS_progress) : ::isatty(STDOUT_FILENO) != 0;
  if (absl::Status st = Train(*r, options); !st.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace gtp::recipes::vlm

int main(int argc, char** argv) { return gtp::recipes::vlm::Main(argc, argv); }
