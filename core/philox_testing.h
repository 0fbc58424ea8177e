// Test-only: fills host arrays with Philox values computed on a CUDA device.
#pragma once
#include <cstdint>

#include "absl/status/status.h"

namespace gtp::testing_internal {
// out_raw: 4·n words, out_uniform / out_normal: n floats each, for indices
// [first, first + n) of stream `key`. Host pointers; runs on device 0.
absl::Status PhiloxOnDevice(uint64_t key, uint64_t first, int n, uint32_t* out_raw,
                            float* out_uniform, float* out_normal);
}  // namespace gtp::testing_internal
