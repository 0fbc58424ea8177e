#include "core/kernels/cudnn_engine.h"

#include <cstdio>
#include <utility>

namespace gtp::kernels {
namespace {

cuda::AttentionShape Cast(const AttentionEngine::Shape& s) {
  return cuda::AttentionShape{s.B, s.T, s.NH, s.NKV, s.HS, s.causal, s.row_stride};
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudnnEngine>> CudnnEngine::Create(int device) {
  auto a = cuda::CudnnAttention::Create(device);
  if (!a.ok()) return a.status();
  return std::unique_ptr<CudnnEngine>(new CudnnEngine(std::move(*a)));
}

int64_t CudnnEngine::Workspace(const Shape& s, bool backward) {
  const auto key = std::make_tuple(s.B, s.T, s.NH, s.NKV, s.HS, s.causal, s.row_stride, backward);
  auto it = bytes_.find(key);
  if (it != bytes_.end()) return it->second;
  absl::StatusOr<int64_t> b =
      backward ? attn_->BackwardWorkspaceBytes(Cast(s)) : attn_->ForwardWorkspaceBytes(Cast(s));
  if (!b.ok()) {
    // Not an error: the flash kernels take the shape. Said once per shape.
    std::fprintf(stderr,
                 "cuDNN attention declines B=%lld T=%lld NH=%lld NKV=%lld HS=%lld row stride "
                 "%lld %s (%s): %s\n",
                 static_cast<long long>(s.B), static_cast<long long>(s.T),
                 static_cast<long long>(s.NH), static_cast<long long>(s.NKV),
                 static_cast<long long>(s.HS), static_cast<long long>(s.row_stride),
                 s.causal ? "causal" : "bidirectional", backward ? "backward" : "forward",
                 b.status().ToString().c_str());
  }
  const int64_t bytes = b.ok() ? *b : -1;
  bytes_.emplace(key, bytes);
  return bytes;
}

int64_t CudnnEngine::ForwardWorkspace(const Shape& s) { return Workspace(s, false); }
int64_t CudnnEngine::BackwardWorkspace(const Shape& s) { return Workspace(s, true); }

absl::Status CudnnEngine::Forward(const bf16* q, const bf16* k, const bf16* v, bf16* out,
                                  float* lse, const Shape& s, void* workspace,
                                  int64_t workspace_bytes, cudaStream_t stream) {
  return attn_->Forward(q, k, v, out, lse, Cast(s), workspace, workspace_bytes, stream);
}

absl::Status CudnnEngine::Backward(const bf16* dout, const bf16* q, const bf16* k, const bf16* v,
                                   const bf16* out, const float* lse, bf16* dq, bf16* dk, bf16* dv,
                                   const Shape& s, void* workspace, int64_t workspace_bytes,
                                   cudaStream_t stream) {
  return attn_->Backward(dout, q, k, v, out, lse, dq, dk, dv, Cast(s), workspace, workspace_bytes,
                         stream);
}

}  // namespace gtp::kernels
