#include "optimizer/grad_norm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/status.h"
#include "optimizer/internal/device.h"

namespace gtp::optimizer {

namespace ops = kernels::ops;

namespace {

// This rank's share of the buffer's sum of squares (see the file comment)
// as ranges of the flat gradient: the first `n_count` count, the rest count
// as 0·ss (copies another rank counts: nothing when finite, NaN when not — a
// NaN on one TP rank's copy alone must still skip the step everywhere).
// Adjacent ranges of one kind are coalesced.
struct Ranges {
  std::vector<Tensor> xs;
  int n_count = 0;
};

Ranges LocalRanges(const GradBuffer& grads) {
  Ranges out;
  const bool scattered = grads.options().reduce == ReduceMode::kReduceScatter;
  if (!scattered && grads.replicate()->rank() != 0) return out;
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
      bool copies = false;  // a tied LM-head copy counts on the first stage only
      for (int i : b.params) copies |= grads.params()[i].sharded->tied_copy();
      if (!copies) {
        add(lo, hi, true);  // every sharded element counts; padding is zero
        continue;
      }
      for (int i : b.params) {
        const GradParam& p = grads.params()[i];
        add(std::max(lo, p.offset), std::min(hi, p.offset + p.numel), !p.sharded->tied_copy());
      }
      continue;
    }
    for (int i : b.params) {
      const GradParam& p = grads.params()[i];
      add(std::max(lo, p.offset), std::min(hi, p.offset + p.numel), gtp0 && (p.tp_sharded || tp0));
    }
  }
  // Counting ranges first: adding the 0·ss terms last changes no bits.
  for (int pass = 0; pass < 2; ++pass) {
    for (const Run& r : runs) {
      if (r.counts != (pass == 0)) continue;
      out.xs.push_back(grads.data().Slice(r.a, r.z));
      if (pass == 0) ++out.n_count;
    }
  }
  return out;
}

// Ranks that do not count contribute zero, so summing over every group is
// right in both reduce modes.
std::vector<comm::Communicator*> NormGroups(const GradBuffer& g) {
  std::vector<comm::Communicator*> groups{g.replicate(), g.tp(), g.gtp()};
  groups.insert(groups.end(), g.distinct().begin(), g.distinct().end());
  return groups;
}

}  // namespace

absl::StatusOr<double> GlobalGradNorm(const std::vector<const GradBuffer*>& buffers) {
  double total = 0.0;
  for (const GradBuffer* g : buffers) {
    const Ranges r = LocalRanges(*g);
    const std::vector<double> ss = ops::SumSquaresMany(g->exec(), r.xs);
    double local = 0.0;
    for (size_t i = 0; i < ss.size(); ++i) local += static_cast<int>(i) < r.n_count ? ss[i] : 0.0 * ss[i];
    // Two f32 words keep ~48 bits of the double through f32 collectives.
    const float hi = static_cast<float>(local);
    std::vector<float> words{hi, std::isfinite(local) ? static_cast<float>(local - hi) : 0.0f};
    for (comm::Communicator* c : NormGroups(*g)) {
      GTP_RETURN_IF_ERROR(internal::Annotate(
          internal::AllReduceHostF32(g->exec(), c, &words, comm::ReduceOp::kSum),
          "summing the grad norm", c));
    }
    total += static_cast<double>(words[0]) + static_cast<double>(words[1]);
  }
  return std::sqrt(total);
}

bool GradNormOnDeviceSupported(const std::vector<const GradBuffer*>& buffers) {
  if (buffers.empty()) return false;
  const kernels::Exec& e = buffers[0]->exec();
  for (const GradBuffer* g : buffers) {
    if (g->exec().device != e.device) return false;
    for (comm::Communicator* c : NormGroups(*g)) {
      if (c != nullptr && c->size() > 1 && (!e.is_cuda() || c->backend() != "nccl")) return false;
    }
  }
  return true;
}

absl::Status GlobalGradNormOnDevice(const std::vector<const GradBuffer*>& buffers, double max_norm,
                                    const Tensor& out) {
  if (!GradNormOnDeviceSupported(buffers)) {
    return absl::FailedPreconditionError(
        "GlobalGradNormOnDevice: the buffers' groups need device-memory collectives (NCCL) "
        "or one rank each");
  }
  const kernels::Exec& e = buffers[0]->exec();
  const int64_t nb = static_cast<int64_t>(buffers.size());
  Tensor words = e.Empty({2 * nb});
  for (int64_t b = 0; b < nb; ++b) {
    const GradBuffer* g = buffers[b];
    const Ranges r = LocalRanges(*g);
    const int n = static_cast<int>(r.xs.size());
    Tensor sums = e.Empty({std::max<int64_t>(1, n)}, DType::kI64);
    ops::SumSquaresInto(e, r.xs, sums);
    Tensor w = words.Slice(2 * b, 2 * b + 2);
    ops::GradNormWords(e, sums, r.n_count, n, w);
    for (comm::Communicator* c : NormGroups(*g)) {
      if (c == nullptr || c->size() == 1) continue;
      GTP_RETURN_IF_ERROR(internal::Annotate(
          comm::Run(c->AllReduce(w.raw_data(), w.raw_data(), 2, DType::kF32, comm::ReduceOp::kSum)),
          "summing the grad norm", c));
    }
  }
  ops::GradNormFinalize(e, words, max_norm, out);
  return absl::OkStatus();
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
