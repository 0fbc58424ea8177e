// core/kernels/fp8/wgmma_plan.cc — ChooseWgmmaPlan (wgmma_plan.h).
#include "core/kernels/fp8/wgmma_plan.h"

#include <utility>

#include "core/status.h"

namespace gtp::kernels::fp8::cuda {
namespace {

// The kernel's tile columns and K block (wgmma_gemm.cu's kBlockN, kBlockK).
constexpr int64_t kTileN = 128, kBlockK = 128;

// Units of work (tiles, or clusters of tiles) times splits over the
// clusters that run at once: the waves a GEMM takes, each of a unit's share
// of K.
double Waves(int64_t units, int splits, int clusters) {
  return static_cast<double>((units * splits + clusters - 1) / clusters) / splits;
}

// The splits (1–4) for units of work over the clusters that run at once,
// and the waves they then take: split-K where the units fill the
// multiprocessors poorly and K is long. Up to 4 ranges, each at least 2 K
// blocks; a split must gain a tenth (the partial sums' extra pass).
std::pair<int, double> BestSplits(int64_t units, int64_t K, int clusters) {
  const int64_t kbs = (K + kBlockK - 1) / kBlockK;
  int splits = 1;
  double best = Waves(units, 1, clusters);
  for (int s = 2; s <= 4 && 2 * s <= kbs; ++s) {
    const double cost = Waves(units, s, clusters);
    if (cost < 0.9 * best) splits = s, best = cost;
  }
  return {splits, best};
}

}  // namespace

WgmmaPlan ChooseWgmmaPlan(int64_t M, int64_t N, int64_t K, const WgmmaCapacity& capacity) {
  GTP_CHECK(M > 0 && N > 0 && K > 0 && capacity.multiprocessors > 0 && capacity.pairs_2x1 >= 0 &&
                capacity.pairs_1x2 >= 0,
            "ChooseWgmmaPlan: a ", M, " x ", N, " x ", K, " GEMM on ", capacity.multiprocessors,
            " multiprocessors (", capacity.pairs_2x1, " and ", capacity.pairs_1x2,
            " pairs): the shape and the multiprocessors must be positive, the pairs not negative");
  // 128-row tiles in a pair of CTAs where the tiles pair up exactly: 2 × 1
  // (b's stage tiles shared), else 1 × 2 (a's), else none. Measured
  // (docs/PERFORMANCE.md, session 25, H200): a pair is 0–4 % faster than
  // none; 2 × 2 is slower (30 clusters of 4 fit, 120 of the 132
  // multiprocessors), so not chosen.
  WgmmaPlan plan;
  // The old y read from L2 where the epilogue adds it (beta ≠ 0: the
  // wgrad's accumulation; a no-op otherwise): the wgrad 4–5 % faster, the
  // forward and dgrad within noise (session 28, H100).
  plan.prefetch_y = true;
  if (M % (2 * 128) == 0 && capacity.pairs_2x1 >= 1) {
    plan.cluster_m = 2;
  } else if (N % (2 * kTileN) == 0 && capacity.pairs_1x2 >= 1) {
    plan.cluster_n = 2;
  }
  const int64_t units = ((M + plan.cluster_m * 128 - 1) / (plan.cluster_m * 128)) *
                        ((N + plan.cluster_n * kTileN - 1) / (plan.cluster_n * kTileN));
  const int clusters = plan.cluster_m == 2   ? capacity.pairs_2x1
                       : plan.cluster_n == 2 ? capacity.pairs_1x2
                                             : capacity.multiprocessors;
  const auto [splits, waves] = BestSplits(units, K, clusters);
  plan.splits = splits;
  // Or 192-row tiles, one CTA each (three consumer warpgroups), unsplit: a
  // wave of them takes 192/128 × 0.9 of a wave of 128-row tiles (0.86–0.90
  // fitted on six shapes, docs/PERFORMANCE.md, session 27, H100), so they
  // win where their rounding to whole waves costs no more (they lose where
  // it costs a wave: 350M's wgrad, 176 tiles against 128 pairs). Not split:
  // where a split would pay, the units are few and 128-row tiles fill the
  // multiprocessors better anyway; and on long shapes the partial sums'
  // extra pass would cost more than the fraction of a wave it saves.
  // No cluster: a 1 × 2 pair of them (a's tiles shared) gives the same
  // bits but has not been timed (fp8_linear_benchmark's fp8_wgmma_m192_1x2).
  constexpr double kTallWaveCost = 192.0 / 128.0 * 0.9;
  const int64_t tall_units = ((M + 191) / 192) * ((N + kTileN - 1) / kTileN);
  if (Waves(tall_units, 1, capacity.multiprocessors) * kTallWaveCost < waves) {
    plan.cluster_m = plan.cluster_n = 1;
    plan.tile_m = 192;
    plan.splits = 1;
  }
  return plan;
}

}  // namespace gtp::kernels::fp8::cuda
