// tests/ckpt_testing.h — helpers shared by the checkpoint round-trip tests.
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"
#include "gtest/gtest.h"

namespace gtp::testing {

// A fresh (emptied) directory path under $TEST_TMPDIR (or /tmp).
std::string FreshDir(const std::string& name);

// Iteration `it` of checkpoint roots `a` and `b` hold the same keys and, key
// by key, the same global tensor bytes (the order in the metadata follows
// the writing ranks, so it is not compared).
::testing::AssertionResult SameGlobalTensors(const std::string& a, const std::string& b, int64_t it);

// The token at position t of sample s in step `step` of the data stream
// named `stream`: Philox-drawn below `vocab`, one sample `seq + 1` tokens, so
// every layout (and one rank) trains on the same data.
int32_t StepToken(const std::string& stream, int step, int64_t s, int64_t t, int64_t seq,
                  int64_t vocab);
// Samples [first, first + B) of step `step` into `tokens` and their next
// tokens into `targets` (both i32 [B, seq] on the host).
void FillStep(const std::string& stream, int step, int64_t first, int64_t vocab, const Tensor& tokens,
              const Tensor& targets);

}  // namespace gtp::testing
