// dev/cudnn_attention/cudnn_attention.h — fused causal attention through
// cuDNN 9's graph (backend descriptor) API: the same contract as
// cuda::FlashAttentionForward/Backward (core/kernels/cuda.h).
//
//   q[B, T, NH, HS], k/v[B, T, NKV, HS] bf16 (NH a multiple of NKV: head h
//   reads kv head h / (NH/NKV)); out like q; lse[B, NH, T] f32 =
//   ln Σ_{j≤i} exp(scale·q_i·k_j), scale = 1/√HS (cuDNN's softmax "stats").
//   Backward writes (=) dq like q and dk/dv like k/v, bf16.
//
// cuDNN has no SDPA node we can reach without cudnn-frontend, so each pass is
// spelled as the operation graph cuDNN's fused-attention engines recognise:
//   fwd: S = Q·Kᵀ, ·scale, causal select(row ≥ col, S, −inf), softmax with
//        stats (max, sub, exp, sum, log, add, div), O = P·V.
//   bwd: D = rowsum(dO∘O) (into the workspace), S and P = exp(S·scale − lse)
//        recomputed, dV = Pᵀ·dO, dS = P∘(dO·Vᵀ − D)·scale, dK = dSᵀ·Q,
//        dQ = dS·K. GQA: dK/dV per query head, then summed over the group.
// Deterministic backward: dQ is the matmul's own output (no f32 dQ
// accumulator in the workspace that blocks add into with atomics); that is
// what cudnn-frontend's set_deterministic_algorithm(true) builds on Hopper
// (its "dP workspace" variant). Engines whose numerical notes say
// NONDETERMINISTIC are skipped as well. The non-deterministic variant
// (dQ accumulated in f32) is kept for timing.
//
// Usage:
//   GTP_ASSIGN_OR_RETURN(std::unique_ptr<CudnnAttention> attn, CudnnAttention::Create());
//   AttentionShape s{B, T, NH, NKV, HS};
//   GTP_ASSIGN_OR_RETURN(int64_t ws, attn->ForwardWorkspaceBytes(s));   // builds the plan
//   ... allocate ws bytes ...
//   GTP_RETURN_IF_ERROR(attn->Forward(q, k, v, out, lse, s, workspace, ws, stream));
//
// Every method returns Status (cuDNN errors carry cudnnGetErrorString and the
// call that failed). Plans are built on first use of a shape and cached;
// building calls into cuDNN on the host (and may allocate device memory), so
// warm every shape (the *WorkspaceBytes calls) before capturing a CUDA graph.
// Forward/Backward on a built shape only enqueue work on `stream`: no host
// synchronisation, capturable. Not thread-safe: one object per thread/stream
// owner.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/dtype.h"

struct cudnnContext;

namespace gtp::kernels::cuda {

struct AttentionShape {
  int64_t B = 0, T = 0, NH = 0, NKV = 0, HS = 0;
  bool operator<(const AttentionShape& o) const {
    return std::tie(B, T, NH, NKV, HS) < std::tie(o.B, o.T, o.NH, o.NKV, o.HS);
  }
};

// cuDNN's version number (cudnnGetVersion(), e.g. 91400 for 9.14.0).
int64_t CudnnVersion();

class CudnnAttention {
 public:
  // Creates a cuDNN handle on the current device. Fails when cuDNN or the
  // device is unusable.
  static absl::StatusOr<std::unique_ptr<CudnnAttention>> Create();
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // Device workspace bytes Forward/Backward need for `s`; builds and caches
  // the plan (host work, may block). InvalidArgument for unsupported shapes
  // (HS not 64/128, NH % NKV != 0), Unimplemented when no cuDNN engine
  // supports the graph.
  absl::StatusOr<int64_t> ForwardWorkspaceBytes(const AttentionShape& s);
  absl::StatusOr<int64_t> BackwardWorkspaceBytes(const AttentionShape& s);

  // Enqueue on `stream`; never block once the shape's plan is built.
  // workspace: at least *WorkspaceBytes(s) bytes of device memory, 256-byte aligned.
  absl::Status Forward(const bf16* q, const bf16* k, const bf16* v, bf16* out, float* lse,
                       const AttentionShape& s, void* workspace, int64_t workspace_bytes,
                       cudaStream_t stream);
  absl::Status Backward(const bf16* dout, const bf16* q, const bf16* k, const bf16* v,
                        const bf16* out, const float* lse, bf16* dq, bf16* dk, bf16* dv,
                        const AttentionShape& s, void* workspace, int64_t workspace_bytes,
                        cudaStream_t stream);

  // Which cuDNN engine (global index) runs a built plan, for logs; -1 when
  // the shape has no plan yet.
  int64_t ForwardEngine(const AttentionShape& s) const;
  int64_t BackwardEngine(const AttentionShape& s) const;

  // dev only: a backward that accumulates dQ in f32 with atomics
  // (non-deterministic), to time against the deterministic one.
  void set_deterministic(bool deterministic) { deterministic_ = deterministic; }
  // dev only: build plans from the k-th engine config (in heuristics order)
  // that finalizes, instead of the first; for sweeping. Unimplemented when
  // there are fewer.
  void set_config_choice(int k) { config_choice_ = k; }

  struct Plan;  // defined in the .cc

 private:
  explicit CudnnAttention(cudnnContext* handle);
  absl::StatusOr<Plan*> GetPlan(const AttentionShape& s, bool backward);

  cudnnContext* handle_;
  bool deterministic_ = true;
  int config_choice_ = 0;
  // key: (shape, backward, deterministic, config choice)
  std::map<std::tuple<AttentionShape, bool, bool, int>, std::unique_ptr<Plan>> plans_;
};

}  // namespace gtp::kernels::cuda
