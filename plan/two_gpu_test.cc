// Issue 32's two-GPU acceptance: the 2 × H200 measurements of 2026-11-30 in
// docs/PERFORMANCE.md against the planner (plan/clusters/h200.cluster), 15 %.
//
// Sources (docs/PERFORMANCE.md, all 2026-11-30, device tool nvidia-h200-x2,
// NCCL 2.28.3, NCCL_NVLS_ENABLE=0):
//   [A] "Collectives: NCCL backend vs torch.distributed — 2× H200" — gtp's
//       f32 all-gather / reduce-scatter / all-reduce, µs per call (20
//       back-to-back calls timed by the host after a synchronise), size = the
//       full gathered / reduced buffer.
//   [B] its sub-section "Re-measured — 2× H200, 2026-11-30, later the same
//       day" — the same commands again; the doc's reference figures (the
//       16 MiB all-gather outlier of [A], 98 µs, "did not reproduce").
//   [C] "Two GPUs, GTP2 (NCCL) — 2× H200": GPT-2 124M, f32, B = 8 per rank,
//       T = 1024, GTP2 (world 2, global batch 16), 576 ms/step, peak 13.7 GiB
//       per GPU; next to the one-GPU row of "GPT-2 124M training step: gtp vs
//       PyTorch — one H200" (same shape, B = 8, 560 ms/step, 14.3 GiB).
//
// What is and is not reproduced (each test says why):
//   - all-gather and reduce-scatter of [B]: the link is fitted to them
//     (FitAlphaBeta), and every row is within 15 % (within 10 % in fact);
//   - [A]'s all-gather / reduce-scatter rows as a cross-check: 8 of 10 within
//     15 %; the two others are named;
//   - all-reduce ([A], [B]): within 15 % since h200.cluster carries NCCL's
//     all-reduce link, fitted apart to [B] (nvlink_allreduce_*); costed as
//     reduce-scatter + all-gather it was +22 to +112 % (one ring kernel pays
//     one call's latency and reaches more bus bandwidth);
//   - [C] memory: within 15 % (the allocator's peak vs the planner's bytes
//     without the CUDA context and NCCL buffers, which the allocator does not
//     hold);
//   - [C] step time: the absolute time cannot be predicted. The run used the
//     f32 naive attention kernels of that morning (replaced the same day;
//     ~35 ms a layer, "12 layers × ~35 ms" of the 560), whose cost the
//     planner's f32 attention (batched GEMMs + softmax passes at the default
//     curve) does not describe and for which no calibration table exists: it
//     predicts 174 ms for the one-GPU step. What is checked is GTP2's cost on
//     top of one GPU: the measured one-GPU step × the planner's ratio (GTP2 /
//     one GPU at the same per-rank batch) against the measured GTP2 step.
//     This passes because compute dominates: the planner puts 1.0 ms of GTP
//     communication on the critical path where the two measurements differ
//     by 16 ms (run-to-run noise included) — that part is not reproduced.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "plan/cluster.h"
#include "plan/collectives.h"
#include "plan/step.h"
#include "recipes/trainer/config.h"

namespace gtp::plan {
namespace {

constexpr double kMiB = 1 << 20;
const std::vector<double> kSizesMiB = {1, 4, 16, 64, 256};
// [B] (the reference figures), µs.
const std::vector<double> kAgB = {22.3, 26.6, 51.0, 153.1, 527.9};
const std::vector<double> kRsB = {20.7, 27.5, 54.6, 162.4, 567.3};
const std::vector<double> kArB = {21.4, 33.9, 78.6, 252.5, 902.2};
// [A], µs.
const std::vector<double> kAgA = {28, 27, 98, 156, 526};
const std::vector<double> kRsA = {24, 27, 57, 161, 562};
const std::vector<double> kArA = {25, 39, 87, 261, 900};

Cluster H200() {
  absl::StatusOr<Cluster> c = LoadCluster("plan/clusters/h200.cluster");
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

double Err(double predicted, double measured) { return predicted / measured - 1; }

// Predicted µs of one 2-GPU collective (both GPUs on one node: NVLink).
double PredictUs(Collective c, double mib, const Cluster& cl) {
  return 1e6 * CollectiveTime(c, mib * kMiB, Placement{2, 2}, cl);
}

TEST(TwoGpu, FittedLinkIsTheClusterFiles) {
  // The fit of [B]'s all-gather and reduce-scatter (10 points, least squares
  // in time, n = 2) is what h200.cluster records, to its rounding (0.1 GB/s,
  // 0.1 µs: 0.05 % and 0.5 %).
  std::vector<double> bytes, seconds;
  for (size_t i = 0; i < kSizesMiB.size(); ++i) {
    for (double us : {kAgB[i], kRsB[i]}) {
      bytes.push_back(kSizesMiB[i] * kMiB);
      seconds.push_back(us * 1e-6);
    }
  }
  absl::StatusOr<AlphaBetaFit> f = FitAlphaBeta(bytes, seconds, 2);
  ASSERT_TRUE(f.ok()) << f.status();
  std::printf("fit: beta %.2f GB/s, alpha %.2f us, max |err| %.1f %%, rms %.1f %%\n", f->link.bandwidth / 1e9,
              f->link.latency * 1e6, 100 * f->max_rel_error, 100 * f->rms_rel_error);
  const Cluster c = H200();
  EXPECT_NEAR(f->link.bandwidth, c.intra.bandwidth, 0.0005 * c.intra.bandwidth);
  EXPECT_NEAR(f->link.latency, c.intra.latency, 0.005 * c.intra.latency);
  EXPECT_LT(f->max_rel_error, 0.10);
}

TEST(TwoGpu, AllGatherAndReduceScatterWithin15Percent) {
  const Cluster c = H200();
  std::printf("[B] size MiB | all-gather meas/pred us (err) | reduce-scatter meas/pred us (err)\n");
  for (size_t i = 0; i < kSizesMiB.size(); ++i) {
    const double ag = PredictUs(Collective::kAllGather, kSizesMiB[i], c);
    const double rs = PredictUs(Collective::kReduceScatter, kSizesMiB[i], c);
    std::printf("  %6.0f | %7.1f / %7.1f (%+5.1f %%) | %7.1f / %7.1f (%+5.1f %%)\n", kSizesMiB[i], kAgB[i], ag,
                100 * Err(ag, kAgB[i]), kRsB[i], rs, 100 * Err(rs, kRsB[i]));
    EXPECT_LT(std::abs(Err(ag, kAgB[i])), 0.15) << kSizesMiB[i] << " MiB all-gather";
    EXPECT_LT(std::abs(Err(rs, kRsB[i])), 0.15) << kSizesMiB[i] << " MiB reduce-scatter";
  }
}

TEST(TwoGpu, FirstTableCrossCheck) {
  // [A] was not used by the fit. Outside 15 %: the 1 MiB all-gather (28 µs
  // there, 22.3 in [B]: launch-bound sizes vary by a quarter between runs;
  // predicted 22.7, −19 %) and the 16 MiB all-gather (98 µs, the outlier the
  // doc says did not reproduce; [B] has 51.0; −45 %). The other 8 are inside.
  const Cluster c = H200();
  int inside = 0;
  std::vector<std::string> outside;
  for (size_t i = 0; i < kSizesMiB.size(); ++i) {
    const double ag = PredictUs(Collective::kAllGather, kSizesMiB[i], c);
    const double rs = PredictUs(Collective::kReduceScatter, kSizesMiB[i], c);
    std::printf("[A] %4.0f MiB: all-gather %5.0f / %6.1f (%+5.1f %%), reduce-scatter %5.0f / %6.1f (%+5.1f %%)\n",
                kSizesMiB[i], kAgA[i], ag, 100 * Err(ag, kAgA[i]), kRsA[i], rs, 100 * Err(rs, kRsA[i]));
    if (std::abs(Err(ag, kAgA[i])) < 0.15) ++inside; else outside.push_back("ag" + std::to_string(int(kSizesMiB[i])));
    if (std::abs(Err(rs, kRsA[i])) < 0.15) ++inside; else outside.push_back("rs" + std::to_string(int(kSizesMiB[i])));
  }
  EXPECT_EQ(inside, 8);
  EXPECT_EQ(outside, (std::vector<std::string>{"ag1", "ag16"}));
}

TEST(TwoGpu, AllReduceLinkIsTheClusterFilesAndWithin15Percent) {
  // NCCL's 2-GPU all-reduce is one ring kernel: one call's latency (21.4 µs
  // at 1 MiB vs the all-gather's 22.3) and more bus bandwidth (298 GB/s at
  // 256 MiB vs 254). Costed as reduce-scatter + all-gather over the fitted
  // link (2·20.6 µs + S/254.1 GB/s) it came out +112 % at 1 MiB and +22 % at
  // 256 MiB. Its own fit to [B] (least squares in relative error, so that the
  // launch-bound 1 MiB point counts as much as the 256 MiB one) is what
  // h200.cluster records, to its rounding, and every [B] point is then
  // within 15 % (within 4.3 %).
  std::vector<double> bytes, seconds;
  for (size_t i = 0; i < kSizesMiB.size(); ++i) {
    bytes.push_back(kSizesMiB[i] * kMiB);
    seconds.push_back(kArB[i] * 1e-6);
  }
  absl::StatusOr<AlphaBetaFit> f =
      FitAlphaBeta(bytes, seconds, 2, Collective::kAllReduce, FitError::kRelative);
  ASSERT_TRUE(f.ok()) << f.status();
  std::printf("all-reduce fit: beta %.2f GB/s, alpha %.2f us, max |err| %.1f %%\n", f->link.bandwidth / 1e9,
              f->link.latency * 1e6, 100 * f->max_rel_error);
  const Cluster c = H200();
  EXPECT_NEAR(f->link.bandwidth, c.intra_allreduce.bandwidth, 0.0005 * c.intra_allreduce.bandwidth);
  EXPECT_NEAR(f->link.latency, c.intra_allreduce.latency, 0.005 * c.intra_allreduce.latency);
  std::vector<int> outside_a;
  for (size_t i = 0; i < kSizesMiB.size(); ++i) {
    const double ar = PredictUs(Collective::kAllReduce, kSizesMiB[i], c);
    EXPECT_NEAR(ar, 18.4 + kSizesMiB[i] * kMiB / 290.9e9 * 1e6, 1e-6);  // by hand: α' + S/β'
    std::printf("all-reduce %4.0f MiB: [B] %6.1f [A] %5.0f predicted %7.1f us ([B] %+5.1f %%, [A] %+5.1f %%)\n",
                kSizesMiB[i], kArB[i], kArA[i], ar, 100 * Err(ar, kArB[i]), 100 * Err(ar, kArA[i]));
    EXPECT_LT(std::abs(Err(ar, kArB[i])), 0.15) << kSizesMiB[i] << " MiB all-reduce [B]";
    if (std::abs(Err(ar, kArA[i])) >= 0.15) outside_a.push_back(static_cast<int>(kSizesMiB[i]));
  }
  // [A], not fitted (the first, noisier table: its small sizes ran 10 to 20 %
  // slower than [B]'s): 4 of 5 within 15 %; outside, 4 MiB (32.8 vs 39 µs, −15.9 %).
  EXPECT_EQ(outside_a, std::vector<int>{4});
}

Prediction Gpt124mF32(const std::vector<std::string>& extra, const Cluster& c) {
  std::vector<std::string> sets = {"train.precision=f32", "train.micro_batch=8"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  absl::StatusOr<recipes::proto::Recipe> r = recipes::LoadRecipe("recipes/gpt_124m/gpt_124m.pbtxt", sets);
  EXPECT_TRUE(r.ok()) << r.status();
  absl::StatusOr<Layout> l = LayoutFromRecipe(*r);
  EXPECT_TRUE(l.ok()) << l.status();
  const CostModel cost(c);
  absl::StatusOr<Prediction> p = Predict(*r, *l, cost);
  EXPECT_TRUE(p.ok()) << p.status();
  return *p;
}

// What the caching allocator holds (Memory::allocator): the planner's total
// without the CUDA context and NCCL's buffers, which it does not hold.
double AllocatorBytes(const Memory& m) { return m.allocator(); }

TEST(TwoGpu, Gtp2Gpt124mStep) {
  const Cluster c = H200();
  const Prediction one = Gpt124mF32({"train.global_batch=8"}, c);
  const Prediction two =
      Gpt124mF32({"parallel.world_size=2", "parallel.tp_num_weight_shards=2", "train.global_batch=16"}, c);
  ASSERT_EQ(two.layout.gtp, 2);
  ASSERT_EQ(two.layout.dp, 1);
  constexpr double kGiB = 1 << 30;
  const double mem_one = AllocatorBytes(one.memory), mem_two = AllocatorBytes(two.memory);
  // Memory: 14.3 GiB (1 GPU) and 13.7 GiB (GTP2) measured. Predicted
  // 13.32 GB = 12.41 GiB (−13 %) and 12.95 GB = 12.06 GiB (−12 %): f32
  // activations with the T×T probabilities (0.40 GB a layer) dominate;
  // the planner halves weights, grads and AdamW state under GTP2 and adds
  // two blocks' gather buffers.
  std::printf("memory GiB: 1 GPU measured 14.3 predicted %.2f (%+.1f %%); GTP2 measured 13.7 predicted %.2f (%+.1f %%)\n",
              mem_one / kGiB, 100 * Err(mem_one, 14.3 * kGiB), mem_two / kGiB, 100 * Err(mem_two, 13.7 * kGiB));
  EXPECT_LT(std::abs(Err(mem_two, 13.7 * kGiB)), 0.15);
  EXPECT_LT(std::abs(Err(mem_one, 14.3 * kGiB)), 0.15);
  // Step time: see the file comment. Absolute: 174 ms predicted for 560
  // measured (the naive-attention kernels are not modelled) — not asserted.
  const double ratio = two.step_time / one.step_time;
  const double predicted_ms = 560 * ratio;
  std::printf("step: predicted 1 GPU %.1f ms, GTP2 %.1f ms (ratio %.4f); 560 ms x ratio = %.1f vs 576 measured (%+.1f %%); "
              "GTP2 exposed comm predicted %.2f ms\n",
              1e3 * one.step_time, 1e3 * two.step_time, ratio, predicted_ms, 100 * Err(predicted_ms, 576),
              1e3 * (two.breakdown.gtp_gather.exposed + two.breakdown.gtp_reduce_scatter.exposed));
  EXPECT_LT(std::abs(Err(predicted_ms, 576)), 0.15);
  EXPECT_GE(ratio, 1.0);  // GTP2 never predicted faster per rank than one GPU
}

}  // namespace
}  // namespace gtp::plan
