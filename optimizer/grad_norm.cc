#include "optimizer/grad_norm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/status.h"
#include "optimizer/internal/device.h"

namespace gtp::optimizer {

namespace ops = kernels::ops;

namespace {

// This rank's share of the buffer's sum of squares (see the file comment).
// Ranges that count and ranges that count as 0·ss (copies another rank
// counts) are coalesced into runs, and all runs are summed in one pass with
// one stream synchronisation.
double LocalSumSquares(const GradBuffer& grads) {
  const kernels::Exec& e = grads.exec();
  const bool scattered = grads.options().reduce == ReduceMode::kReduceScatter;
  if (!scattered && grads.replicate()->rank() != 0) return 0.0;
  const bool gtp0 = grads.gtp()->rank() == 0, tp0 = grads.tp()->rank() == 0;
  struct Run {
    int64_t a, z;
    bool counts;
  };
  std::vector<Run> runs;
  auto add = [&runs](int64_t a, int64_t z, bool counts) {
    if (a >= z) return;
    if (!runs.empty() && runs.back().z == a && runs.back().counts == counts) {
      runs.back().z = z;
    } else {
      runs.push_back({a, z, counts});
    }
  };
  for (const Bucket& b : grads.buckets()) {
    auto [lo, hi] = grads.valid_range(b.index);
    if (!b.replicated) {
      add(lo, hi, true);  // every sharded element counts; padding is zero
      continue;
    }
    for (int i : b.params) {
      const GradParam& p = grads.params()[i];
      // A copy another rank counts still contributes 0·ss: nothing when
      // finite, NaN when not — a NaN on one TP rank's copy alone (TP copies
      // are never reduced together) must still skip the step everywhere.
      add(std::max(lo, p.offset), std::min(hi, p.offset + p.numel), gtp0 && (p.tp_sharded || tp0));
    }
  }
  std::vector<Tensor> xs;
  for (const Run& r : runs) xs.push_back(grads.data().Slice(r.a, r.z));
  const std::vector<double> ss = ops::SumSquaresMany(e, xs);
  double local = 0.0;
  for (size_t i = 0; i < runs.size(); ++i) local += runs[i].counts ? ss[i] : 0.0 * ss[i];
  return local;
}

}  // namespace

absl::StatusOr<double> GlobalGradNorm(const std::vector<const GradBuffer*>& buffers) {
  double total = 0.0;
  for (const GradBuffer* g : buffers) {
    const double local = LocalSumSquares(*g);
    // Two f32 words keep ~48 bits of the double through f32 collectives.
    const float hi = static_cast<float>(local);
    std::vector<float> words{hi, std::isfinite(local) ? static_cast<float>(local - hi) : 0.0f};
    // Ranks that do not count contribute zero, so summing over every group
    // is right in both reduce modes.
    std::vector<comm::Communicator*> groups{g->replicate(), g->tp(), g->gtp()};
    groups.insert(groups.end(), g->distinct().begin(), g->distinct().end());
    for (comm::Communicator* c : groups) {
      GTP_RETURN_IF_ERROR(internal::Annotate(
          internal::AllReduceHostF32(g->exec(), c, &words, comm::ReduceOp::kSum),
          "summing the grad norm", c));
    }
    total += static_cast<double>(words[0]) + static_cast<double>(words[1]);
  }
  return std::sqrt(total);
}

absl::StatusOr<double> GlobalGradNorm(const GradBuffer& grads) {
  return GlobalGradNorm(std::vector<const GradBuffer*>{&grads});
}

void ScaleGrads(const GradBuffer& grads, float factor) {
  for (const Bucket& b : grads.buckets()) {
    auto [lo, hi] = grads.valid_range(b.index);
    Tensor v = grads.data().Slice(lo, hi);
    ops::Axpby(grads.exec(), factor, v, 0.0f, v);
  }
}

absl::StatusOr<double> ClipGradNorm(const std::vector<const GradBuffer*>& buffers,
                                    double max_norm) {
  GTP_ASSIGN_OR_RETURN(double norm, GlobalGradNorm(buffers));
  if (max_norm > 0 && std::isfinite(norm) && norm > max_norm) {
    for (const GradBuffer* g : buffers) ScaleGrads(*g, static_cast<float>(max_norm / (norm + 1e-6)));
  }
  return norm;
}

absl::StatusOr<double> ClipGradNorm(const GradBuffer& grads, double max_norm) {
  return ClipGradNorm(std::vector<const GradBuffer*>{&grads}, max_norm);
}

}  // namespace gtp::optimizer
