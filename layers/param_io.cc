#include "layers/param_io.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "core/allocator.h"
#include "core/kernels/tensor_io.h"
#include "core/philox.h"
#include "core/status.h"

namespace gtp::layers {

namespace {
// Calls fn(shard_row, global_row) for every real (non-pad) row of p's shard.
template <typename Fn>
void ForEachShardRow(const ShardedParam& p, Fn fn) {
  const auto& L = p.global_layout();
  GTP_CHECK(L.row_map != nullptr, p.name(), ": no global layout");
  for (int64_t r = 0; r < p.shard_rows(); ++r) {
    const int64_t local_row = p.shard_row_begin() + r;
    if (local_row >= p.rows()) break;  // padding
    fn(r, L.row_map(local_row));
  }
}
}  // namespace

void InitShardFromGlobal(ShardedParam& p, ShardedParam::GlobalLayout layout, uint64_t seed,
                         float std) {
  p.set_global_layout(std::move(layout));
  const auto& L = p.global_layout();
  HeapAllocator host;
  Tensor h = Tensor::Zeros({p.shard_rows(), p.cols()}, DType::kF32, host);
  const uint64_t key = KeyFromName(p.name(), seed);
  float* d = h.data<float>();
  ForEachShardRow(p, [&](int64_t r, int64_t gr) {
    for (int64_t c = 0; c < p.cols(); ++c) {
      d[r * p.cols() + c] =
          std * PhiloxNormal(key, static_cast<uint64_t>(gr * L.global_cols + L.col_offset + c));
    }
  });
  kernels::CopyFromHostF32(p.exec(), d, p.shard());
  p.MarkUpdated();
}

void LoadShardFromGlobal(ShardedParam& p, const float* global) {
  const auto& L = p.global_layout();
  HeapAllocator host;
  Tensor h = Tensor::Zeros({p.shard_rows(), p.cols()}, DType::kF32, host);
  float* d = h.data<float>();
  ForEachShardRow(p, [&](int64_t r, int64_t gr) {
    std::copy(global + gr * L.global_cols + L.col_offset,
              global + gr * L.global_cols + L.col_offset + p.cols(), d + r * p.cols());
  });
  kernels::CopyFromHostF32(p.exec(), d, p.shard());
  p.MarkUpdated();
}

void StoreShardToGlobal(const ShardedParam& p, const Tensor& src, float* global) {
  const auto& L = p.global_layout();
  GTP_CHECK(src.shape() == p.shard().shape() &&
                (src.dtype() == DType::kF32 || src.dtype() == DType::kBF16),
            "StoreShardToGlobal: ", src.ToString(), " is not shaped like ", p.name());
  const std::vector<float> widened = kernels::DeviceToHostF32(p.exec(), src);
  const float* d = widened.data();
  ForEachShardRow(p, [&](int64_t r, int64_t gr) {
    std::copy(d + r * p.cols(), d + (r + 1) * p.cols(), global + gr * L.global_cols + L.col_offset);
  });
}

}  // namespace gtp::layers
