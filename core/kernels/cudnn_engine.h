// core/kernels/cudnn_engine.h — cuDNN's fused attention as the Exec's
// AttentionEngine (core/kernels/ops.h): what the trainer runs on CUDA in bf16
// unless train.attention is "flash". Plans are built per shape on first use
// (the trainer's warm-up steps, before any CUDA-graph capture). Its own
// target, so only its users link libcudnn.
//
//   GTP_ASSIGN_OR_RETURN(auto engine, kernels::CudnnEngine::Create(device));
//   exec.attention = engine.get();
#pragma once

#include <map>
#include <memory>
#include <tuple>

#include "absl/status/statusor.h"
#include "core/kernels/cuda/cudnn_attention.h"
#include "core/kernels/ops.h"

namespace gtp::kernels {

class CudnnEngine : public AttentionEngine {
 public:
  static absl::StatusOr<std::unique_ptr<CudnnEngine>> Create(int device);

  const char* name() const override { return "cudnn"; }
  int64_t ForwardWorkspace(const Shape& s) override;
  int64_t BackwardWorkspace(const Shape& s) override;
  absl::Status Forward(const bf16* q, const bf16* k, const bf16* v, bf16* out, float* lse,
                       const Shape& s, void* workspace, int64_t workspace_bytes,
                       cudaStream_t stream) override;
  absl::Status Backward(const bf16* dout, const bf16* q, const bf16* k, const bf16* v,
                        const bf16* out, const float* lse, bf16* dq, bf16* dk, bf16* dv,
                        const Shape& s, void* workspace, int64_t workspace_bytes,
                        cudaStream_t stream) override;
  // cuDNN's version (e.g. 91400 for 9.14.0), for the banner.
  static int64_t Version() { return cuda::CudnnVersion(); }

 private:
  explicit CudnnEngine(std::unique_ptr<cuda::CudnnAttention> a) : attn_(std::move(a)) {}
  // -1 when cuDNN declines the shape (remembered: asked once per shape).
  int64_t Workspace(const Shape& s, bool backward);

  std::unique_ptr<cuda::CudnnAttention> attn_;
  // key: (B, T, NH, NKV, HS, causal, row_stride, backward)
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, bool, int64_t, bool>, int64_t>
      bytes_;
};

}  // namespace gtp::kernels
