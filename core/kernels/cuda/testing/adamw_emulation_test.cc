// AdamW (core/kernels/cuda/adamw.cu: the one-tensor kernel and the
// multi-tensor kernel of the training step, its 4-wide and scalar paths) run
// on the CPU by the warp emulator (core/kernels/cuda/testing/warp_emulator.h),
// in three orders of each block's threads, against the CPU kernel
// (core/kernels/cpu.h) bit for bit: both backends document the same
// rounding, element for element. The CPU kernel is itself checked against a
// double reference (core/kernels/cpu). adamw_gpu_test runs the same kernels
// on a GPU.
// The emulator before the kernel source:
// clang-format off
#define GTP_CUDA_HOST_EMULATION
#include "core/kernels/cuda/testing/warp_emulator.h"
#include "core/kernels/cuda/adamw.cu"
// clang-format on
// (its launchers now run the grids on the host, synchronously)

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/kernels/cpu.h"
#include "core/kernels/cuda/testing/emulation_checks.h"
#include "gtest/gtest.h"

namespace gtp::kernels::cuda {
namespace {

alignas(16) double smem[1024];  // the blocks' dynamic shared memory (these kernels take none)

using FVec = std::vector<float>;

// Three tensors: one 16-byte aligned with a tail (n % 4 = 3) spanning two
// chunks of kAdamWChunk, one starting 4 bytes past alignment (the scalar
// path), one short; each with its own weight decay; step 3.
TEST(AdamWEmulationTest, MultiAndSingleMatchTheCpuBitForBit) {
  gtp::emu::SetShared(smem, sizeof(smem));
  const int64_t sizes[3] = {kAdamWChunk + 7, 1001, 5};
  const int64_t offsets[3] = {0, 1, 0};  // floats into each buffer: 1 misaligns it
  const float decays[3] = {0.1f, 0.0f, 0.01f};
  AdamWParams hp;
  hp.lr = 3e-3f;
  hp.step = 3;
  hp.grad_scale = 0.5f;
  std::vector<FVec> p0, g, m0, v0;
  for (int i = 0; i < 3; ++i) {
    const int64_t n = sizes[i] + offsets[i];
    p0.push_back(gtp::emu::RandomNormal(n, 10 + i));
    g.push_back(gtp::emu::RandomNormal(n, 20 + i));
    m0.push_back(gtp::emu::RandomNormal(n, 30 + i, 0.1f));
    FVec v = gtp::emu::RandomNormal(n, 40 + i, 0.1f);
    for (float& x : v) x = x * x;  // second moments ≥ 0
    v0.push_back(v);
  }
  // The CPU's step.
  std::vector<FVec> cp = p0, cm = m0, cv = v0;
  std::vector<AdamWSegment> cpu_segs;
  for (int i = 0; i < 3; ++i) {
    cpu_segs.push_back({cp[i].data() + offsets[i], nullptr, g[i].data() + offsets[i],
                        cm[i].data() + offsets[i], cv[i].data() + offsets[i], sizes[i], decays[i]});
  }
  cpu::AdamWMulti(cpu_segs.data(), 3, hp);
  const auto out = gtp::emu::InEverySchedule([&] {
    std::vector<FVec> ep = p0, em = m0, ev = v0;
    std::vector<AdamWSegment> segs;
    for (int i = 0; i < 3; ++i) {
      segs.push_back({ep[i].data() + offsets[i], nullptr, g[i].data() + offsets[i],
                      em[i].data() + offsets[i], ev[i].data() + offsets[i], sizes[i], decays[i]});
    }
    const std::vector<AdamWChunk> chunks = AdamWChunks(segs.data(), 3);
    AdamWMulti(segs.data(), chunks.data(), static_cast<int>(chunks.size()), hp, nullptr);
    std::vector<FVec> flat;
    for (int i = 0; i < 3; ++i) {
      flat.push_back(ep[i]);
      flat.push_back(em[i]);
      flat.push_back(ev[i]);
    }
    return flat;
  });
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(gtp::emu::SameBits(out[3 * i], cp[i], "p"));
    EXPECT_TRUE(gtp::emu::SameBits(out[3 * i + 1], cm[i], "m"));
    EXPECT_TRUE(gtp::emu::SameBits(out[3 * i + 2], cv[i], "v"));
  }
  // The one-tensor kernel, on the first tensor (no decay).
  AdamWParams one = hp;
  one.weight_decay = 0.0f;
  FVec sp = p0[1], sm = m0[1], sv = v0[1];
  cpu::AdamW(sp.data(), g[1].data(), sm.data(), sv.data(), static_cast<int64_t>(sp.size()), one);
  FVec ep = p0[1], em = m0[1], ev = v0[1];
  AdamW(ep.data(), g[1].data(), em.data(), ev.data(), static_cast<int64_t>(ep.size()), one,
        nullptr);
  EXPECT_TRUE(gtp::emu::SameBits(ep, sp, "p (one tensor)"));
  EXPECT_TRUE(gtp::emu::SameBits(em, sm, "m (one tensor)"));
  EXPECT_TRUE(gtp::emu::SameBits(ev, sv, "v (one tensor)"));
}

}  // namespace
}  // namespace gtp::kernels::cuda
