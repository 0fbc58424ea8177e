// layers/inference/inference_session.h — forward-only incremental decoding
// of a GptModel with a KV cache.
//
// An InferenceSession reads the parameters of an existing single-rank
// GptModel (TP = GTP = 1, one pipeline part: e.g. a checkpoint loaded on one
// rank, which reshards any saved layout) and runs the model's forward with
// the same kernels (core/kernels/ops: embedding, norms, linears, RoPE, GELU /
// SwiGLU), one token — or a prompt of n tokens — at a time. Each attention
// layer keeps the keys and values of every position seen so far:
//
//   x   = wte[tok] (+ wpe[pos])                         tok, pos: the n new tokens
//   per block:  q, k, v = Norm1(x)·W{q,k,v}ᵀ (+ b)       k/v: NKV heads (GQA)
//               RoPE(q, k) at positions pos              (rope models)
//               K[pos], V[pos] ← k, v                    the cache, f32 [max_len, NKV, HS]
//               y_t = Σ_{s ≤ pos_t} softmax_s(q_t·K_s/√HS)·V_s   query head h reads kv head
//               h/(NH/NKV) x += y·Woᵀ (+ b);  x += MLP(Norm2(x))
//   logits = Norm_f(x)·W_lmᵀ over the V real vocabulary rows
//
// so the logits of position t equal those of the full causal forward over
// tokens [0, t] (layers/gpt.h), up to f32 summation order. No gradient state
// is kept; the model is not modified (its activation buffers are untouched).
//
// Supported: attention + MLP blocks (and hybrid '*' / '-' patterns), MHA or
// GQA, learned positions or RoPE, LayerNorm or RMSNorm, GELU or SwiGLU,
// biases or not, tied or untied head; f32 models on the CPU or on one CUDA
// device. The cached attention is kernels::ops::DecodeAttention
// (core/kernels/decode_attention.h) on either. Create returns Unimplemented
// naming what it cannot run (Mamba, MoE, prefix embeddings, bf16) and
// InvalidArgument for a sharded or pipelined model, or an Exec on another
// device than the model's parameters.
//
//   GTP_ASSIGN_OR_RETURN(auto s, InferenceSession::Create(model, /*max_len=*/256));
//   GTP_ASSIGN_OR_RETURN(std::vector<float> logits, s->Append(prompt_ids));  // [n, V]
//   int32_t next = Argmax(last row); s->Append({next}) ...
//
// On CUDA (a model built on a CUDA Exec; pass that Exec to Create) the
// caches live in device memory, preallocated to max_len; every op of a step
// is enqueued on exec.stream, and Append waits for the step's logits, copied
// to the host (sampling stays on the host). Nothing else synchronises.
//
// Not thread-safe; every method blocks (CPU kernels run on the caller's
// thread; CUDA: Append returns once its logits are on the host). The model
// (and, on CUDA, the Exec's allocator, stream and BLAS context) must outlive
// the session.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/allocator.h"
#include "core/kernels/ops.h"
#include "core/tensor.h"
#include "layers/gpt.h"

namespace gtp::layers::inference {

// The keys and values of one attention layer: f32 [max_len, NKV, HS] each
// (one sequence) on the session's device, rows [0, length) valid.
struct KvCache {
  Tensor k, v;
};

class InferenceSession {
 public:
  // A session over `model`'s parameters for sequences of up to `max_len`
  // tokens (≤ model.config().max_seq_len with learned positions). Allocates
  // the caches. `exec`: where the model's parameters live and the session
  // runs (for a CUDA model: its device, an allocator on it for the caches
  // and scratch, a stream and a BLAS context); the first form is for a CPU
  // model. Status as in the file comment (ResourceExhausted when the caches
  // do not fit).
  static absl::StatusOr<std::unique_ptr<InferenceSession>> Create(const GptModel& model,
                                                                  int64_t max_len);
  static absl::StatusOr<std::unique_ptr<InferenceSession>> Create(const GptModel& model,
                                                                  int64_t max_len,
                                                                  const kernels::Exec& exec);

  // Feeds `tokens` (ids in [0, V)) at positions length() .. length() + n − 1
  // and returns their logits, host f32 [n, V] row-major (row i: the
  // distribution of the token after tokens[i]). InvalidArgument for an id
  // out of range or past max_len (the session is left unchanged); a CUDA
  // error as its Status.
  absl::StatusOr<std::vector<float>> Append(absl::Span<const int32_t> tokens);
  // Forgets every cached position (a new sequence).
  void Reset() { length_ = 0; }
  int64_t length() const { return length_; }
  int64_t max_len() const { return max_len_; }
  int64_t vocab_size() const { return config_.vocab_size; }

 private:
  // One block's parameters (undefined tensors: absent).
  struct Layer {
    bool attention = false, mlp = false;
    Tensor ln1_w, ln1_b, q_w, q_b, k_w, k_b, v_w, v_b, o_w, o_b;
    Tensor ln2_w, ln2_b, fc_w, fc_b, proj_w, proj_b;
    KvCache cache;
  };
  InferenceSession() = default;
  Tensor Norm(const Tensor& x, const Tensor& w, const Tensor& b) const;
  Tensor Linear(const Tensor& x, const Tensor& w, const Tensor& b) const;
  // A host i32 [n] tensor's values on the session's device (enqueued; the
  // host tensor must live until the step's final synchronisation).
  absl::StatusOr<Tensor> ToDevice(const Tensor& host_i32) const;

  GptConfig config_;
  HeapAllocator host_;  // host staging; the caches and scratch on the CPU
  kernels::Exec exec_;  // the caches and scratch, and where every op runs
  int64_t max_len_ = 0, length_ = 0;
  int64_t C_ = 0, NH_ = 0, NKV_ = 0, HS_ = 0;
  Tensor wte_, wpe_, lnf_w_, lnf_b_, head_;  // head_: [V, C] (wte_ when tied)
  std::vector<Layer> layers_;
};

}  // namespace gtp::layers::inference
