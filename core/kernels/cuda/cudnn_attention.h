// core/kernels/cuda/cudnn_attention.h — fused attention (bf16) through
// cuDNN 9's graph (backend descriptor) API: the same contract as
// cuda::FlashAttentionForward/Backward (core/kernels/cuda.h), 1.15–1.9× faster
// on an H200 (dev/cudnn_attention/NOTES.md).
//
//   q[B, T, NH, HS], k/v[B, T, NKV, HS] bf16 (NH a multiple of NKV: head h
//   reads kv head h / (NH/NKV)); out like q; lse[B, NH, T] f32 =
//   ln Σ_j exp(scale·q_i·k_j), scale = 1/√HS (cuDNN's softmax "stats"), over
//   j ≤ i when s.causal (the default), over every j < T when not.
//   Backward writes (=) dq like q and dk/dv like k/v, bf16. HS 64 or 128.
//   Pointers 16-byte aligned. q, k, v, dq, dk, dv may be token-strided
//   (s.row_stride: consecutive tokens row_stride elements apart, heads HS
//   apart, batches T·row_stride apart): column blocks of one packed
//   [B·T, (NH + 2·NKV)·HS] matrix, as a fused QKV GEMM writes it (q at
//   element 0 of a row, k at NH·HS, v at (NH + NKV)·HS). out, dout and lse
//   are always dense.
//
// Each pass is the operation graph cuDNN's fused-attention engines recognise
// (no cudnn-frontend here):
//   fwd: S = Q·Kᵀ, ·scale, causal select(row ≥ col, S, −inf) (only when
//        s.causal), softmax with
//        stats (max, sub, exp, sum, log, add, div), O = P·V.
//   bwd: D = rowsum(dO∘O) (into the workspace), P = exp(mask(S·scale − lse))
//        recomputed, dV = Pᵀ·dO, dS = P∘(dO·Vᵀ − D)·scale, dK = dSᵀ·Q,
//        dQ = dS·K. GQA: dK/dV per query head, then summed over the group.
// Deterministic backward (bit-identical run to run): dQ is the matmul's own
// output, not an f32 accumulator that blocks add into with atomics. That is
// the graph cudnn-frontend's set_deterministic_algorithm(true) builds on
// Hopper (its "dP workspace" variant: the workspace holds B·NH·T²·2 bytes of
// dP, ≈ 200 MB at B=8 T=1024 NH=12). Engines whose numerical notes say
// NONDETERMINISTIC are refused too.
//
// Usage:
//   GTP_ASSIGN_OR_RETURN(std::unique_ptr<CudnnAttention> attn, CudnnAttention::Create(device));
//   AttentionShape s{B, T, NH, NKV, HS};
//   GTP_ASSIGN_OR_RETURN(int64_t ws, attn->BackwardWorkspaceBytes(s));  // builds the plan
//   ... ws bytes of device memory ...
//   GTP_RETURN_IF_ERROR(attn->Forward(q, k, v, out, lse, s, workspace, ws, stream));
//   GTP_RETURN_IF_ERROR(attn->Backward(dout, q, k, v, out, lse, dq, dk, dv, s, workspace, ws,
//                                      stream));
//
// Every method returns Status (cuDNN errors carry cudnnGetErrorString, cuDNN's
// last error message and the call that failed). Plans are built on the first
// use of a shape and cached; building runs cuDNN's heuristics on the host and
// may allocate device memory and block, so call *WorkspaceBytes for every
// shape before capturing a CUDA graph. Forward/Backward on a built shape only
// enqueue work on `stream` (no host synchronisation) and are capturable into
// a CUDA graph (checked by cudnn_attention_gpu_test). Not thread-safe: one
// object per (device, thread).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/dtype.h"

struct cudnnContext;

namespace gtp::kernels::cuda {

// The problem a plan is built for: sizes, the mask (causal: query i sees
// keys j ≤ i; otherwise every key) and the token stride of q, k, v. Plans are
// cached per whole AttentionShape, so a causal plan never serves a
// bidirectional call, nor a dense plan a packed one.
struct AttentionShape {
  int64_t B = 0, T = 0, NH = 0, NKV = 0, HS = 0;
  bool causal = true;
  // Elements between consecutive tokens of q, k, v, dq, dk and dv (one row
  // of a packed QKV matrix); 0: dense, i.e. NH·HS for q/dq and NKV·HS for
  // k/v/dk/dv. Nonzero: a multiple of 8 (16-byte rows) and ≥ max(NH, NKV)·HS.
  int64_t row_stride = 0;
  bool operator<(const AttentionShape& o) const {
    return std::tie(B, T, NH, NKV, HS, causal, row_stride) <
           std::tie(o.B, o.T, o.NH, o.NKV, o.HS, o.causal, o.row_stride);
  }
};

// cuDNN's version number (cudnnGetVersion(), e.g. 91400 for 9.14.0).
int64_t CudnnVersion();

class CudnnAttention {
 public:
  // Creates a cuDNN handle on `device` (made current on this thread). Fails
  // when cuDNN or the device is unusable.
  static absl::StatusOr<std::unique_ptr<CudnnAttention>> Create(int device);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // Device workspace bytes Forward/Backward need for `s`; builds and caches
  // the plan (host work, may block). InvalidArgument for unsupported shapes
  // (HS not 64/128, NH % NKV != 0, a row_stride below max(NH, NKV)·HS or not
  // a multiple of 8), Unimplemented when no cuDNN engine supports the graph.
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

  // Experiment knobs (dev/cudnn_attention): a backward that accumulates dQ in
  // f32 with atomics (faster, not deterministic), and plans from the k-th
  // engine config (heuristics order) that finalizes instead of the first
  // (Unimplemented when there are fewer). Set before the first use of a
  // shape; the trainer uses neither.
  void set_deterministic(bool deterministic) { deterministic_ = deterministic; }
  void set_config_choice(int k) { config_choice_ = k; }

  // Which cuDNN engine (global index) runs a built plan, for logs; -1 when
  // the shape has no plan yet.
  int64_t ForwardEngine(const AttentionShape& s) const;
  int64_t BackwardEngine(const AttentionShape& s) const;

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
