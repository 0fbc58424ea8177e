// core/kernels/cuda/testing/emulation_checks.h — what the warp emulator's
// kernel tests share: inputs, the closeness check against a double
// reference, and the run in the three schedules (include after
// warp_emulator.h).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "gtest/gtest.h"

#ifndef GTP_CUDA_HOST_EMULATION
#error "include core/kernels/cuda/testing/warp_emulator.h first"
#endif

namespace gtp::emu {

// n values from N(shift, scale²), from `seed`.
inline std::vector<float> RandomNormal(size_t n, uint32_t seed, float scale = 1.0f,
                                       float shift = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(shift, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// x as T: float, or bf16 rounded to nearest even (core/dtype.h); and back.
template <class T>
std::vector<T> Converted(const std::vector<float>& x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else {
    std::vector<T> out;
    for (float v : x) out.push_back(ToBF16(v));
    return out;
  }
}
template <class T>
std::vector<float> Widened(const std::vector<T>& x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else {
    std::vector<float> out;
    for (const T& v : x) out.push_back(ToF32(v));
    return out;
  }
}

// Every element finite and within tol·max(max|want|, 1) of want. The inputs
// are O(1), so 1 is the scale of the terms an output sums: an output whose
// reference is 0 (or near it) is the f32 cancellation of such terms. For
// EXPECT_TRUE(Near(…)); the failure names the first element out of bounds.
inline ::testing::AssertionResult Near(const std::vector<float>& got,
                                       const std::vector<double>& want, double tol,
                                       const std::string& what) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure()
           << what << ": " << got.size() << " values, the reference has " << want.size();
  }
  double m = 1.0;
  for (double w : want) m = std::fmax(m, std::fabs(w));
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i]) || !(std::fabs(got[i] - want[i]) <= tol * m)) {
      return ::testing::AssertionFailure()
             << what << "[" << i << "] of " << got.size() << " = " << got[i] << ", want " << want[i]
             << " within " << tol * m;
    }
  }
  return ::testing::AssertionSuccess();
}

// got and want the same bits element for element (codes, scales, or values
// a backend documents as rounded alike). For EXPECT_TRUE(SameBits(…)); the
// failure names the count and the first that differs.
inline ::testing::AssertionResult SameBits(const std::vector<float>& got,
                                           const std::vector<float>& want,
                                           const std::string& what) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure()
           << what << ": " << got.size() << " values, want " << want.size();
  }
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) == 0) continue;
    if (bad++ == 0) first = i;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": " << bad << " of " << got.size() << " differ, the first at [" << first
         << "]: " << got[first] << " vs " << want[first];
}

// run() (which launches kernels and returns their outputs) in each of the
// emulator's three schedules — thread 0 first, the last thread first, a
// seeded shuffle — whose outputs must agree bit for bit: a thread that reads
// shared memory another writes with no barrier between makes them differ.
// Returns the first run's outputs.
inline std::vector<std::vector<float>> InEverySchedule(
    const std::function<std::vector<std::vector<float>>()>& run, uint32_t seed = 1) {
  const Schedule schedules[3] = {Schedule::kInOrder, Schedule::kReverse, Schedule::kShuffled};
  std::vector<std::vector<float>> first;
  for (int s = 0; s < 3; ++s) {
    SetSchedule(schedules[s], seed);
    std::vector<std::vector<float>> out = run();
    if (s == 0) {
      first = out;
      continue;
    }
    EXPECT_EQ(out.size(), first.size());
    for (size_t k = 0; k < out.size() && k < first.size(); ++k) {
      EXPECT_EQ(out[k].size(), first[k].size());
      EXPECT_EQ(0, std::memcmp(out[k].data(), first[k].data(),
                               std::min(out[k].size(), first[k].size()) * sizeof(float)))
          << "output " << k << " differs between schedules 0 and " << s;
    }
  }
  return first;
}

}  // namespace gtp::emu
