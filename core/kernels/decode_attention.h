// core/kernels/decode_attention.h — attention of a few new queries against a
// KV cache (incremental decoding), dispatched by the Exec's device like the
// ops of ops.h. The math and the backends' kernels: decode_attention_kernels.h.
//
//   // the step's keys/values are in cache rows [pos0, pos0 + n) already
//   ops::DecodeAttention(exec, q.View({n, NH, HS}), cache_k, cache_v, pos0,
//                        y.View({n, NH, HS}));
//
// Tensors on exec.device, contiguous, f32. CPU: runs on the calling thread;
// CUDA: enqueued on exec.stream, never blocks. Shape mismatches abort
// (GTP_CHECK). Calls writing distinct outputs may run concurrently.
#pragma once

#include <cstdint>

#include "core/kernels/ops.h"
#include "core/tensor.h"

namespace gtp::kernels::ops {

// q[n, NH, HS], k/v[L_max, NKV, HS] with NH % NKV == 0 and pos0 + n ≤ L_max,
// out like q (=): query i (position pos0 + i) attends causally over cache
// rows [0, pos0 + i], scaled by 1/√HS. n = 0 does nothing.
void DecodeAttention(const Exec& e, const Tensor& q, const Tensor& k, const Tensor& v, int64_t pos0,
                     const Tensor& out);

}  // namespace gtp::kernels::ops
