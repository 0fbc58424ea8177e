// optimizer/internal/device.h — small device-agnostic helpers the optimizer
// needs beyond core/kernels/ops.h: raw-kernel dispatch (Newton–Schulz,
// casts), 2-D strided copies and host-scalar collectives. Every function runs
// on the CPU or enqueues on exec.stream, as ops:: does; those returning
// Status block (they synchronise to read results on the host).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "comm/communicator.h"
#include "core/kernels/kernels.h"
#include "core/kernels/ops.h"
#include "core/tensor.h"

namespace gtp::optimizer::internal {

// X[M, N] = NewtonSchulz(G[M, N]); scratch comes from e.alloc.
void NewtonSchulz(const kernels::Exec& e, const Tensor& G, const Tensor& X, int steps,
                  kernels::NsCoefficients coeffs);

// dst ← src elementwise (same numel, contiguous), converting between f32
// and bf16 where the dtypes differ.
void CastInto(const kernels::Exec& e, const Tensor& src, const Tensor& dst);

// Copies a rows × cols block of f32 between row-major matrices with leading
// dimensions src_ld / dst_ld (in elements).
void Copy2D(const kernels::Exec& e, const float* src, int64_t src_ld, float* dst, int64_t dst_ld,
            int64_t rows, int64_t cols);

// All-reduces host values over `c` through a buffer on e's device (NCCL
// needs device memory). dtype is kF32 (values as float) or kI64. Blocks.
absl::Status AllReduceHostF32(const kernels::Exec& e, comm::Communicator* c,
                              std::vector<float>* values, comm::ReduceOp op);
absl::Status AllReduceHostI64(const kernels::Exec& e, comm::Communicator* c,
                              std::vector<int64_t>* values, comm::ReduceOp op);
// All-gathers `values` (the same count on every rank) over `c`; the result
// holds c->size() · values.size() entries in rank order. Blocks.
absl::StatusOr<std::vector<int64_t>> AllGatherHostI64(const kernels::Exec& e,
                                                      comm::Communicator* c,
                                                      const std::vector<int64_t>& values);

// Adds "<what> over <group>: " to a failed collective's message.
absl::Status Annotate(const absl::Status& st, const std::string& what, const comm::Communicator* c);

}  // namespace gtp::optimizer::internal
