// core/kernels/fp8/block_reference.h — a block quantiser written from the
// design note (block_scale.h) in double precision on e4m3_reference.h, not
// on the code under test: the quantisers' tests' reference (CPU and, through
// the warp emulator, CUDA), free of the fp8 library.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/kernels/fp8/e4m3_reference.h"

namespace gtp::kernels::fp8::reference {

// Codes and scales of blocks of bh rows (1: 1×128 blocks, 128: 128×128
// tiles) by 128 columns, from the design note: amax in double, scale
// = the f32 nearest amax/448 (double rounding through double is harmless
// for one division of floats: 53 ≥ 2·24 + 2 bits), clamped below at FLT_MIN,
// 1 for amax = 0, NaN for a non-finite block; code = e4m3 of the f32
// nearest x/scale (the same argument), 0x7F in a NaN block.
struct RefBlocks {
  std::vector<uint8_t> q;
  std::vector<float> scales;
};

inline RefBlocks RefQuantizeBlocks(const std::vector<float>& x, int64_t R, int64_t C, int64_t bh) {
  const int64_t cb = (C + 127) / 128;
  const int64_t rb = (R + bh - 1) / bh;
  RefBlocks out{std::vector<uint8_t>(static_cast<size_t>(R * C)),
                std::vector<float>(static_cast<size_t>(rb * cb))};
  for (int64_t i = 0; i < rb; ++i) {
    for (int64_t j = 0; j < cb; ++j) {
      const int64_t r0 = i * bh, r1 = std::min(R, r0 + bh), c0 = j * 128,
                    c1 = std::min(C, c0 + 128);
      double amax = 0;
      bool finite = true;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) {
          finite = finite && std::isfinite(x[r * C + c]);
          amax = std::max(amax, std::fabs(static_cast<double>(x[r * C + c])));
        }
      float s = !finite ? std::numeric_limits<float>::quiet_NaN()
                : amax == 0
                    ? 1.0f
                    : std::max(static_cast<float>(amax / 448.0), std::numeric_limits<float>::min());
      out.scales[i * cb + j] = s;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c)
          out.q[r * C + c] =
              !finite ? 0x7f
                      : E4M3Encode(static_cast<float>(static_cast<double>(x[r * C + c]) / s));
    }
  }
  return out;
}

}  // namespace gtp::kernels::fp8::reference
