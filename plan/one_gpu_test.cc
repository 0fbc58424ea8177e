// Issue 32's one-GPU acceptance, frozen: the planner with the H200 calibration
// of 2026-12-04 against what the trainer measured the same day.
//
// Source: `bash tools/plan/validate_1gpu.sh` on one NVIDIA H200 (driver
// 580.159.04), 2026-12-04, bundle of commit 7ded732 (docs/SCALING.md, status
// table). It calibrated the kernels (the table is
// plan/testdata/h200_2026-12-04.calibration, copied unchanged under a
// provenance comment), trained each tools/bench shape 40 steps and printed
//
//   | shape   | measured ms | predicted ms | measured peak GiB | predicted GiB |
//   | gpt124m | 17.041      | 16.587       |  5.231            |  5.107        |
//   | gpt350m | 43.850      | 42.569       | 12.785            | 12.728        |
//   | moe     | 28.758      | 27.436       |  8.753            |  8.521        |
//   | hybrid  | 37.940      | 39.664       |  5.218            |  5.087        |
//
// (measured: the median ms/step over steps 11–40 and the caching allocator's
// peak; predicted: `plan predict --json` step_s and memory.allocator.)
//
// This test predicts the four shapes again, through the same recipe, the same
// --set strings (built exactly as validate_1gpu.sh builds them and split by
// the CLI's own TakeSets), plan/clusters/h200.cluster and that table, and
// checks two things:
//   1. Acceptance (10 %): every predicted step time and allocator peak within
//      10 % of the measurement — issue 32's criterion. A model change that
//      breaks the acceptance against a real run fails here, without a GPU.
//   2. Drift (1 %): every prediction within 1 % of what the planner printed
//      that day. The planner is deterministic, and the printed figures are
//      rounded to 1e-3 (at most 0.01 % of the smallest, 5.087 GiB), so any
//      movement is a change of the model or of its inputs (cluster file,
//      recipe defaults, calibration parsing). 1 % is far above rounding and
//      floating-point order effects (~1e-12) and well below the smallest
//      margin to the acceptance (the MoE step: −4.6 %, 5.4 points from −10 %):
//      a change that moves a shape by more than 1 % may be right, but it must
//      be looked at and these numbers updated on purpose (with a new
//      measurement if the change is meant to improve the fit).
// The negative controls below show that both checks trip: every kernel row
// 15 % slower breaks the acceptance for three shapes, and the bf16 GEMM rows
// alone 15 % slower move every shape out of the 1 % band.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "plan/calibration.h"
#include "plan/cluster.h"
#include "plan/step.h"
#include "recipes/trainer/config.h"

namespace gtp::plan {
namespace {

constexpr double kGiB = 1 << 30;

// validate_1gpu.sh's cuda strings, verbatim (STEPS = 40, DEVICE = cuda, no GTP_SET).
const std::string kBase =
    "model.vocab_size=50257,model.seq_len=1024,train.micro_batch=8,train.global_batch=8,train.precision=bf16";
const std::string kDense = "model.n_layer=12,model.n_embd=768,model.n_head=12";
const std::string kCommon =
    "data.source=corpus,data.seed=1234,train.seed=1234,train.steps=40,train.log_every=10,train.eval_every=0"
    ",train.device=cuda,checkpoint.every=0,checkpoint.no_resume=true";

struct Shape {
  std::string name, set;  // set: the shape's part of SET
  double measured_ms, measured_gib;
  double predicted_ms, predicted_gib;  // what the planner printed on 2026-12-04
};

const std::vector<Shape>& Shapes() {
  static const std::vector<Shape>* s = new std::vector<Shape>{
      {"gpt124m", kDense, 17.041, 5.231, 16.587, 5.107},
      {"gpt350m", "model.n_layer=24,model.n_embd=1024,model.n_head=16", 43.850, 12.785, 42.569, 12.728},
      {"moe",
       kDense + ",model.moe.num_experts=8,model.moe.top_k=2,model.moe.ffn_hidden=1536,"
                "model.moe.aux_loss_coeff=0.01,model.moe.z_loss_coeff=0.001",
       28.758, 8.753, 27.436, 8.521},
      {"hybrid", "model.layer_pattern=M*-M*-M*-M*-M*-M*-,model.n_layer=18,model.n_embd=768,model.n_head=12", 37.940,
       5.218, 39.664, 5.087},
  };
  return *s;
}

std::vector<Measurement> Table() {
  const std::string path = "plan/testdata/h200_2026-12-04.calibration";
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  std::stringstream ss;
  ss << f.rdbuf();
  absl::StatusOr<std::vector<Measurement>> t = ParseCalibration(ss.str(), path);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : std::vector<Measurement>{};
}

struct Predicted {
  double ms = 0, gib = 0;
  bool calibrated = false;
  std::vector<std::string> uncalibrated;
};

// `plan predict --recipe recipes/gpt_124m/gpt_124m.pbtxt --cluster
// plan/clusters/h200.cluster --calibration T --set SET`, in process.
Predicted PredictShape(const Shape& s, const std::vector<Measurement>& table) {
  std::string set = absl::StrCat(kBase, ",", s.set, ",", kCommon);
  std::string a0 = "plan", a1 = "--set";
  char* argv[] = {a0.data(), a1.data(), set.data(), nullptr};
  int argc = 3;
  const std::vector<std::string> sets = recipes::TakeSets(&argc, argv);
  EXPECT_EQ(argc, 1);
  absl::StatusOr<recipes::proto::Recipe> r = recipes::LoadRecipe("recipes/gpt_124m/gpt_124m.pbtxt", sets);
  EXPECT_TRUE(r.ok()) << s.name << ": " << r.status();
  absl::StatusOr<Cluster> c = LoadCluster("plan/clusters/h200.cluster");
  EXPECT_TRUE(c.ok()) << c.status();
  if (!r.ok() || !c.ok()) return {};
  CostModel cost(*c);
  cost.Add(table);
  absl::StatusOr<Layout> l = LayoutFromRecipe(*r);
  EXPECT_TRUE(l.ok()) << s.name << ": " << l.status();
  if (!l.ok()) return {};
  absl::StatusOr<Prediction> p = Predict(*r, *l, cost);
  EXPECT_TRUE(p.ok()) << s.name << ": " << p.status();
  if (!p.ok()) return {};
  return {1e3 * p->step_time, p->memory.allocator() / kGiB, p->calibrated, p->uncalibrated};
}

std::vector<Predicted> PredictAll(const std::vector<Measurement>& table) {
  std::vector<Predicted> out;
  for (const Shape& s : Shapes()) out.push_back(PredictShape(s, table));
  return out;
}

double Err(double predicted, double reference) { return predicted / reference - 1; }

// The checks, as lists of what is outside (so the controls can run them too).
// A non-finite or non-positive prediction counts as outside.
std::vector<std::string> OutsideMeasured(const std::vector<Predicted>& p, double tol) {
  std::vector<std::string> out;
  for (size_t i = 0; i < p.size(); ++i) {
    const Shape& s = Shapes()[i];
    if (!(std::abs(Err(p[i].ms, s.measured_ms)) <= tol)) out.push_back(s.name + " ms");
    if (!(std::abs(Err(p[i].gib, s.measured_gib)) <= tol)) out.push_back(s.name + " GiB");
  }
  return out;
}
std::vector<std::string> OutsideToday(const std::vector<Predicted>& p, double tol) {
  std::vector<std::string> out;
  for (size_t i = 0; i < p.size(); ++i) {
    const Shape& s = Shapes()[i];
    if (!(std::abs(Err(p[i].ms, s.predicted_ms)) <= tol)) out.push_back(s.name + " ms");
    if (!(std::abs(Err(p[i].gib, s.predicted_gib)) <= tol)) out.push_back(s.name + " GiB");
  }
  return out;
}

constexpr double kAcceptance = 0.10;  // issue 32
constexpr double kDrift = 0.01;       // see the file comment

TEST(OneGpu, H200Within10PercentOfMeasuredAndAtTodaysPrediction) {
  const std::vector<Predicted> p = PredictAll(Table());
  ASSERT_EQ(p.size(), 4u);
  std::printf("shape   | meas ms | pred ms (err) [2026-12-04 pred] | meas GiB | pred GiB (err) [2026-12-04 pred]\n");
  for (size_t i = 0; i < p.size(); ++i) {
    const Shape& s = Shapes()[i];
    std::printf("%-7s | %7.3f | %7.3f (%+5.1f %%) [%7.3f, %+6.2f %%] | %6.3f | %6.3f (%+5.1f %%) [%6.3f, %+6.2f %%]\n",
                s.name.c_str(), s.measured_ms, p[i].ms, 100 * Err(p[i].ms, s.measured_ms), s.predicted_ms,
                100 * Err(p[i].ms, s.predicted_ms), s.measured_gib, p[i].gib, 100 * Err(p[i].gib, s.measured_gib),
                s.predicted_gib, 100 * Err(p[i].gib, s.predicted_gib));
    // The run printed "calibrated: yes" for every shape: every kernel kind
    // the four blocks launch has rows in the table.
    EXPECT_TRUE(p[i].calibrated) << s.name;
    EXPECT_TRUE(p[i].uncalibrated.empty()) << s.name << ": " << p[i].uncalibrated.front();
  }
  EXPECT_EQ(OutsideMeasured(p, kAcceptance), std::vector<std::string>{});
  EXPECT_EQ(OutsideToday(p, kDrift), std::vector<std::string>{});
}

void PrintMs(const char* what, const std::vector<Predicted>& p) {
  for (size_t i = 0; i < p.size(); ++i) {
    const Shape& s = Shapes()[i];
    std::printf("%s: %-7s %7.3f ms (vs measured %+5.1f %%, vs 2026-12-04 prediction %+5.1f %%)\n", what, s.name.c_str(),
                p[i].ms, 100 * Err(p[i].ms, s.measured_ms), 100 * Err(p[i].ms, s.predicted_ms));
  }
}

// Every row `op dtype` (or every row when op is empty) `factor` times slower.
std::vector<Measurement> Slower(std::vector<Measurement> t, double factor, const std::string& op_dtype = "") {
  int n = 0;
  for (Measurement& m : t) {
    if (op_dtype.empty() || absl::StrCat(OpName(m.op), " ", m.dtype) == op_dtype) m.seconds *= factor, ++n;
  }
  EXPECT_GT(n, 0) << op_dtype;
  return t;
}

TEST(OneGpu, NegativeControlEveryKernel15PercentSlowerBreaksTheAcceptance) {
  // Every measured time × 1.15 scales every kernel (interpolation is in
  // log(seconds), extrapolation at the end row's throughput), so each step
  // ≈ 1.15 × today's: gpt124m 16.587 → 19.08 ms (+11.9 % of 17.041),
  // gpt350m → 48.95 (+11.6 %), hybrid → 45.57 (+20.1 %); the MoE (27.436 →
  // 31.55, +9.7 %) stays inside. Memory does not depend on kernel times.
  const std::vector<Predicted> p = PredictAll(Slower(Table(), 1.15));
  ASSERT_EQ(p.size(), 4u);
  PrintMs("every kernel x1.15", p);
  EXPECT_EQ(OutsideMeasured(p, kAcceptance), (std::vector<std::string>{"gpt124m ms", "gpt350m ms", "hybrid ms"}));
}

TEST(OneGpu, NegativeControlBf16Gemm15PercentSlowerLeavesTheDriftBand) {
  // Only the bf16 GEMM rows × 1.15 (the dense projections and the LM head;
  // the MoE's experts are grouped GEMMs, its attention, router and head are
  // not; the hybrid's Mamba in/out projections): every step moves by more
  // than 1 % (gpt124m +8.4 %, gpt350m +8.7 %, moe +2.8 %, hybrid +3.3 %)
  // and every one stays within the 10 % acceptance (+5.5, +5.5, −2.0,
  // +8.0 % of the measurement): a change the acceptance alone would not
  // notice.
  const std::vector<Predicted> p = PredictAll(Slower(Table(), 1.15, "gemm bf16"));
  ASSERT_EQ(p.size(), 4u);
  PrintMs("gemm bf16 x1.15", p);
  EXPECT_EQ(OutsideToday(p, kDrift),
            (std::vector<std::string>{"gpt124m ms", "gpt350m ms", "moe ms", "hybrid ms"}));
  EXPECT_EQ(OutsideMeasured(p, kAcceptance), std::vector<std::string>{});
}

}  // namespace
}  // namespace gtp::plan
