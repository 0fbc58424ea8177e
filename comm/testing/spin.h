// comm/testing/spin.h — a kernel that keeps a stream busy for about `ms`
// (one thread spinning on the SM clock), for timing tests.
#pragma once

#include <cuda_runtime_api.h>

namespace gtp::comm::testing {

void Spin(cudaStream_t stream, double ms);

}  // namespace gtp::comm::testing
