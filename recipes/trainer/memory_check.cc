#include "recipes/trainer/memory_check.h"

#include <unistd.h>

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/cuda_runtime.h"
#include "recipes/trainer/mfu.h"

namespace gtp::recipes {

MemoryCapacity ThisMachine(int local_ranks) {
  MemoryCapacity cap;
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) cap.host = static_cast<double>(pages) * static_cast<double>(page);
  if (CudaDeviceCount() > 0) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, 0) == cudaSuccess) cap.device = static_cast<double>(p.totalGlobalMem);
  }
  cap.local_ranks = local_ranks;
  return cap;
}

absl::Status CheckModelFits(const proto::Recipe& r, int world, const MemoryCapacity& cap) {
  ModelShape shape = ShapeOf(r.model());
  shape.top_k = shape.num_experts;  // memory holds every expert, not the ones a token uses
  const double n = NonPositionParamsApprox(shape);
  const double per_param = r.optim().matrices() == "muon" ? 12.0 : 16.0;
  const bool cuda = r.train().device() == "cuda";
  const double need = cuda ? per_param * n / world : per_param * n * cap.local_ranks / world;
  const double have = cuda ? cap.device : cap.host;
  if (have <= 0 || need <= have) return absl::OkStatus();
  const auto& m = r.model();
  return absl::FailedPreconditionError(absl::StrFormat(
      "the model cannot fit: model.n_layer=%d, model.n_embd=%d, model.vocab_size=%d%s make about "
      "%.3g parameters, and training needs at least %.0f bytes each (f32 weight, gradient, %s) — "
      "%.3g GiB %s, more than the %.3g GiB %s; reduce the model, or spread it over more ranks "
      "(parallel.world_size with tp, tp_num_weight_shards, pp)",
      m.n_layer(), m.n_embd(), m.vocab_size(),
      m.moe().num_experts() > 0 ? absl::StrCat(", model.moe.num_experts=", m.moe().num_experts()) : "",
      n, per_param, r.optim().matrices() == "muon" ? "Muon momentum" : "AdamW's two moments",
      need / (1 << 30), cuda ? "on the busiest GPU" : "on this machine", have / (1 << 30),
      cuda ? "of one GPU" : "of memory it has"));
}

}  // namespace gtp::recipes
