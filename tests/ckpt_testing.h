// tests/ckpt_testing.h — helpers shared by the checkpoint round-trip tests.
#pragma once

#include <cstdint>
#include <string>

#include "gtest/gtest.h"

namespace gtp::testing {

// A fresh (emptied) directory path under $TEST_TMPDIR (or /tmp).
std::string FreshDir(const std::string& name);

// Iteration `it` of checkpoint roots `a` and `b` hold the same keys and, key
// by key, the same global tensor bytes (the order in the metadata follows
// the writing ranks, so it is not compared).
::testing::AssertionResult SameGlobalTensors(const std::string& a, const std::string& b, int64_t it);

}  // namespace gtp::testing
