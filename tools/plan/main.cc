// tools/plan — predict a training step's time and memory on any layout and
// cluster, search layouts, sweep scaling, and calibrate kernel times
// (issue 32; tools/plan/README.md).
//
//   plan predict   --recipe R.pbtxt [--set k=v] --cluster C.cluster [--calibration T] [--csv | --json]
//   plan search    --recipe R.pbtxt [--set k=v] --cluster C.cluster --world N [--memory_cap_gb G] [--top N]
//   plan scale     --recipe R.pbtxt --cluster C.cluster --worlds 8,16,... --mode weak|strong
//                  [--families gtp,fsdp,tpdp] [--sequences_per_gpu S]       (CSV on stdout)
//   plan calibrate --out table.txt [--device auto|cpu|cuda] [--quick]
//
// Exit status: 0 done, 1 a refused input (one line on stderr naming it), 2 bad usage.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/cli.h"
#include "core/user_path.h"
#include "plan/calibration.h"
#include "plan/cluster.h"
#include "plan/report.h"
#include "plan/search.h"
#include "plan/step.h"
#include "recipes/trainer/config.h"
#include "tools/plan/calibrate.h"

ABSL_FLAG(std::string, recipe, "", "recipe file (recipes/*/*.pbtxt, tools/plan/*.pbtxt); --set overrides apply");
ABSL_FLAG(std::string, cluster, "", "cluster file (plan/clusters/*.cluster)");
ABSL_FLAG(std::vector<std::string>, cluster_set, {}, "cluster overrides key=value,... (e.g. gpus_per_node=64)");
ABSL_FLAG(std::string, calibration, "", "calibration table from `plan calibrate` (default: the uncalibrated curve)");
ABSL_FLAG(int, world, 0, "search: GPUs (0: parallel.world_size)");
ABSL_FLAG(double, memory_cap_gb, 0, "memory per GPU a layout may use, GB (0: the cluster's hbm_gb)");
ABSL_FLAG(int, top, 10, "search: layouts to print");
ABSL_FLAG(bool, csv, false, "predict/search: CSV instead of text");
ABSL_FLAG(bool, json, false, "predict: one JSON object (step_s, memory.{total,allocator,...} in bytes) instead of text");
ABSL_FLAG(std::string, worlds, "8,16,32,64,128,256,512,1024,2048,4096", "scale: GPU counts");
ABSL_FLAG(std::string, mode, "weak", "scale: weak (global batch grows with GPUs) | strong (the recipe's global batch)");
ABSL_FLAG(std::string, families, "gtp,fsdp,tpdp", "scale: layout families (plan/search.h FamilySpace)");
ABSL_FLAG(int, sequences_per_gpu, 1, "scale, weak: global batch = this × GPUs");
ABSL_FLAG(bool, fp8_gemm, false,
          "predict: GEMMs at the fp8 peak with MXFP8 gathers (bf16 otherwise): a what-if, not a "
          "prediction of train.precision=fp8, whose block-scaled GEMMs run below that peak "
          "(tools/plan/README.md)");
ABSL_FLAG(std::string, out, "", "calibrate: the table file to write");
ABSL_FLAG(std::string, device, "auto", "calibrate: auto | cpu | cuda");
ABSL_FLAG(bool, quick, false, "calibrate: smallest shapes only");

namespace gtp::plan {
namespace {

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "plan: %s\n", std::string(s.message()).c_str());
  return 1;
}

struct Inputs {
  recipes::proto::Recipe recipe;
  Cluster cluster;
  std::vector<Measurement> table;
  double cap = 0;
};

absl::StatusOr<Inputs> Load(const std::vector<std::string>& sets) {
  Inputs in;
  if (absl::GetFlag(FLAGS_recipe).empty() || absl::GetFlag(FLAGS_cluster).empty()) {
    return absl::InvalidArgumentError("--recipe and --cluster are required (e.g. --recipe tools/plan/llama70b.pbtxt "
                                      "--cluster plan/clusters/h200.cluster)");
  }
  absl::StatusOr<recipes::proto::Recipe> r = recipes::LoadRecipe(UserPath(absl::GetFlag(FLAGS_recipe)), sets);
  if (!r.ok()) return r.status();
  in.recipe = *r;
  absl::StatusOr<Cluster> c = LoadCluster(UserPath(absl::GetFlag(FLAGS_cluster)), absl::GetFlag(FLAGS_cluster_set));
  if (!c.ok()) return c.status();
  in.cluster = *c;
  if (!absl::GetFlag(FLAGS_calibration).empty()) {
    const std::string path = UserPath(absl::GetFlag(FLAGS_calibration));
    std::ifstream f(path);
    if (!f) return absl::NotFoundError(absl::StrCat("cannot read --calibration '", path, "'"));
    std::stringstream ss;
    ss << f.rdbuf();
    absl::StatusOr<std::vector<Measurement>> t = ParseCalibration(ss.str(), path);
    if (!t.ok()) return t.status();
    in.table = *t;
  }
  const double cap_gb = absl::GetFlag(FLAGS_memory_cap_gb);
  if (cap_gb < 0) return absl::InvalidArgumentError("--memory_cap_gb must be >= 0 (0: the cluster's hbm_gb)");
  in.cap = cap_gb > 0 ? cap_gb * 1e9 : in.cluster.hbm_bytes;
  return in;
}

int PredictCmd(const std::vector<std::string>& sets) {
  absl::StatusOr<Inputs> in = Load(sets);
  if (!in.ok()) return Fail(in.status());
  CostModel cost(in->cluster);
  cost.Add(in->table);
  absl::StatusOr<Layout> l = LayoutFromRecipe(in->recipe);
  if (!l.ok()) return Fail(l.status());
  if (absl::GetFlag(FLAGS_fp8_gemm)) l->precision = "fp8";
  absl::StatusOr<Prediction> p = plan::Predict(in->recipe, *l, cost);
  if (!p.ok()) return Fail(p.status());
  if (absl::GetFlag(FLAGS_json)) {
    std::printf("%s\n", JsonPrediction(in->recipe.name(), *p, in->cap).c_str());
  } else if (absl::GetFlag(FLAGS_csv)) {
    std::printf("%s\n%s\n", CsvHeader().c_str(), CsvRow(in->recipe.name(), *p, in->cap).c_str());
  } else {
    std::printf("plan: %s on %s\n%s", in->recipe.name().c_str(), in->cluster.name.c_str(),
                FormatPrediction(*p, in->cluster, in->cap).c_str());
  }
  return 0;
}

int SearchCmd(const std::vector<std::string>& sets) {
  absl::StatusOr<Inputs> in = Load(sets);
  if (!in.ok()) return Fail(in.status());
  CostModel cost(in->cluster);
  cost.Add(in->table);
  const int world = absl::GetFlag(FLAGS_world) > 0 ? absl::GetFlag(FLAGS_world) : in->recipe.parallel().world_size();
  in->recipe.mutable_parallel()->set_world_size(world);
  in->recipe.mutable_parallel()->set_tp(1);
  in->recipe.mutable_parallel()->set_tp_num_weight_shards(1);
  in->recipe.mutable_parallel()->set_pp(1);
  in->recipe.mutable_parallel()->set_vpp(1);
  in->recipe.mutable_parallel()->set_cp(1);
  in->recipe.mutable_parallel()->set_ep(1);
  in->recipe.mutable_parallel()->set_expert_tp_num_weight_shards(1);
  absl::StatusOr<SearchResult> res = Search(in->recipe, world, in->cap, cost, DefaultSpace(in->recipe, in->cluster, world));
  if (!res.ok()) return Fail(res.status());
  if (absl::GetFlag(FLAGS_csv)) {
    std::printf("%s\n", CsvHeader().c_str());
    for (int i = 0; i < absl::GetFlag(FLAGS_top) && i < static_cast<int>(res->ranked.size()); ++i) {
      std::printf("%s\n", CsvRow(absl::StrCat("rank", i + 1), res->ranked[i].pred, in->cap).c_str());
    }
    return 0;
  }
  std::printf("plan search: %s on %d × %s, memory cap %.1f GB, global batch %lld sequences of %lld tokens\n%s",
              in->recipe.name().c_str(), world, in->cluster.name.c_str(), in->cap / 1e9,
              static_cast<long long>(in->recipe.train().global_batch()),
              static_cast<long long>(in->recipe.model().seq_len()),
              FormatSearch(*res, absl::GetFlag(FLAGS_top), in->cap).c_str());
  if (!res->ranked.empty()) {
    std::printf("\nrecommended:\n%s", FormatPrediction(res->ranked[0].pred, in->cluster, in->cap).c_str());
    // The runner-up: the best fitting layout with another TP × GTP × PP (the
    // next rows are often the same split with CP or the micro-batch traded).
    const Layout& w = res->ranked[0].pred.layout;
    for (size_t i = 1; i < res->ranked.size(); ++i) {
      const Candidate& c = res->ranked[i];
      const Layout& l = c.pred.layout;
      if (!c.fits || (l.tp == w.tp && l.gtp == w.gtp && l.pp == w.pp)) continue;
      std::printf("\nrunner-up, rank %zu (%s):\n%s", i + 1, c.why.c_str(),
                  FormatPrediction(c.pred, in->cluster, in->cap).c_str());
      break;
    }
  }
  return 0;
}

int Scale(const std::vector<std::string>& sets) {
  absl::StatusOr<Inputs> in = Load(sets);
  if (!in.ok()) return Fail(in.status());
  CostModel cost(in->cluster);
  cost.Add(in->table);
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode != "weak" && mode != "strong") return Fail(absl::InvalidArgumentError("--mode must be weak or strong"));
  std::printf("%s\n", CsvHeader().c_str());
  for (absl::string_view ws : absl::StrSplit(absl::GetFlag(FLAGS_worlds), ',')) {
    int world = 0;
    if (!absl::SimpleAtoi(ws, &world) || world < 1) {
      return Fail(absl::InvalidArgumentError(absl::StrCat("--worlds: '", ws, "' is not a GPU count (e.g. 8,64)")));
    }
    recipes::proto::Recipe r = in->recipe;
    r.mutable_parallel()->set_world_size(world);
    if (mode == "weak") r.mutable_train()->set_global_batch(int64_t{absl::GetFlag(FLAGS_sequences_per_gpu)} * world);
    for (absl::string_view fam : absl::StrSplit(absl::GetFlag(FLAGS_families), ',')) {
      absl::StatusOr<SearchResult> res = Search(r, world, in->cap, cost, FamilySpace(std::string(fam), r, in->cluster, world));
      if (!res.ok()) return Fail(res.status());
      if (res->ranked.empty() || !res->ranked[0].fits) {
        std::printf("%s,%d,,,,,,,,,,,%lld,,,,,,,0,,,\n", std::string(fam).c_str(), world,
                    static_cast<long long>(r.train().global_batch()));
        continue;
      }
      std::printf("%s\n", CsvRow(std::string(fam), res->ranked[0].pred, in->cap).c_str());
      std::fflush(stdout);
    }
  }
  return 0;
}

int CalibrateCmd() {
  if (absl::GetFlag(FLAGS_out).empty()) {
    return Fail(absl::InvalidArgumentError("calibrate needs --out (e.g. --out h200.calibration)"));
  }
  CalibrateOptions o;
  o.device = absl::GetFlag(FLAGS_device);
  o.quick = absl::GetFlag(FLAGS_quick);
  std::string device;
  absl::StatusOr<std::vector<Measurement>> rows = Calibrate(o, &device);
  if (!rows.ok()) return Fail(rows.status());
  const std::string path = UserPath(absl::GetFlag(FLAGS_out));
  std::ofstream f(path);
  f << FormatCalibration(*rows, device);
  f.close();  // a failed flush (a full disk) shows here
  if (!f) return Fail(absl::InternalError(absl::StrCat("cannot write '", path, "'")));
  std::printf("plan calibrate: %zu measurements on %s written to %s\n", rows->size(), device.c_str(), path.c_str());
  return 0;
}

// A flag the command does not read would be ignored (`plan predict --world
// 64` would plan the recipe's world): named and refused instead, with the
// numbers no command can use.
int CheckFlagsFor(const std::string& cmd, bool have_sets) {
  const std::vector<std::string> model = {"predict", "search", "scale"};
  const std::vector<std::pair<const char*, std::vector<std::string>>> readers = {
      {"recipe", model},           {"cluster", model},         {"cluster_set", model},
      {"calibration", model},      {"memory_cap_gb", model},   {"world", {"search"}},
      {"top", {"search"}},         {"csv", {"predict", "search"}}, {"json", {"predict"}},
      {"fp8_gemm", {"predict"}},   {"worlds", {"scale"}},      {"mode", {"scale"}},
      {"families", {"scale"}},     {"sequences_per_gpu", {"scale"}}, {"out", {"calibrate"}},
      {"device", {"calibrate"}},   {"quick", {"calibrate"}}};
  for (const auto& [flag, cmds] : readers) {
    const absl::CommandLineFlag* f = absl::FindCommandLineFlag(flag);
    // Set away from its default (this absl keeps IsSpecifiedOnCommandLine private).
    if (f != nullptr && f->CurrentValue() != f->DefaultValue() &&
        std::find(cmds.begin(), cmds.end(), cmd) == cmds.end()) {
      std::fprintf(stderr, "plan %s: --%s is for %s only; drop it\n", cmd.c_str(), flag,
                   absl::StrJoin(cmds, ", ").c_str());
      return 2;
    }
  }
  if (have_sets && cmd == "calibrate") {
    std::fprintf(stderr, "plan calibrate: --set applies to a recipe; calibrate reads none: drop it\n");
    return 2;
  }
  if (absl::GetFlag(FLAGS_csv) && absl::GetFlag(FLAGS_json)) {
    std::fprintf(stderr, "plan %s: --csv or --json, not both\n", cmd.c_str());
    return 2;
  }
  const std::pair<const char*, double> positive[] = {
      {"world (0: parallel.world_size)", absl::GetFlag(FLAGS_world) + 1.0},
      {"memory_cap_gb (0: the cluster's hbm_gb)", absl::GetFlag(FLAGS_memory_cap_gb) + 1.0},
      {"top", static_cast<double>(absl::GetFlag(FLAGS_top))},
      {"sequences_per_gpu", static_cast<double>(absl::GetFlag(FLAGS_sequences_per_gpu))}};
  for (const auto& [name, v] : positive) {
    if (!(v >= 1)) {
      std::fprintf(stderr, "plan %s: --%s is out of range\n", cmd.c_str(), name);
      return 2;
    }
  }
  return 0;
}

}  // namespace
}  // namespace gtp::plan

int main(int argc, char** argv) {
  std::vector<std::string> sets = gtp::recipes::TakeSets(&argc, argv);
  gtp::SetUsage("plan predict|search|scale|calibrate: a calibrated time-and-memory model; see tools/plan/README.md");
  std::vector<char*> args = gtp::ParseCommandLine(argc, argv);
  if (args.size() != 2) {
    std::fprintf(stderr, "usage: plan predict|search|scale|calibrate [flags] (tools/plan/README.md)\n");
    return 2;
  }
  const std::string cmd = args[1];
  if (cmd == "predict" || cmd == "search" || cmd == "scale" || cmd == "calibrate") {
    if (int rc = gtp::plan::CheckFlagsFor(cmd, !sets.empty()); rc != 0) return rc;
  }
  if (cmd == "predict") return gtp::plan::PredictCmd(sets);
  if (cmd == "search") return gtp::plan::SearchCmd(sets);
  if (cmd == "scale") return gtp::plan::Scale(sets);
  if (cmd == "calibrate") return gtp::plan::CalibrateCmd();
  std::fprintf(stderr, "plan: unknown command '%s' (predict, search, scale, calibrate)\n", cmd.c_str());
  return 2;
}
