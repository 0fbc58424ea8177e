// The warp emulator's own checks, on small kernels written for them: the
// mma fragments against a plain product, the shuffles, a race that shows as
// outputs differing between schedules, cp.async landing at its wait, and the
// aborts (a lane that skips a shuffle, a barrier some threads never reach, a
// misaligned or never-awaited cp.async, a write past the shared memory).
#define GTP_CUDA_HOST_EMULATION
#include "core/kernels/cuda/testing/warp_emulator.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace gtp::emu {
namespace {

using ::gtp::kernels::cuda::internal::CpAsync16;
using ::gtp::kernels::cuda::internal::CpAsyncCommit;
using ::gtp::kernels::cuda::internal::CpAsyncWait;
using ::gtp::kernels::cuda::internal::SmemAddr;

alignas(16) float smem[1024];

class WarpEmulatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetShared(smem, sizeof(smem));
    SetSchedule(Schedule::kInOrder);
  }
};

uint32_t Bf16Bits(float v) {  // v must be exact in bf16
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  return bits >> 16;
}
uint32_t Pack(float lo, float hi) { return Bf16Bits(lo) | Bf16Bits(hi) << 16; }

// Each lane loads its fragments by the PTX ISA's m16n8k16 layout (written
// out here from the ISA's tables, independently of the emulator's lookup)
// and the warp's D must be the plain product. The values are small integers,
// exact in bf16, and the sums exact in f32.
TEST_F(WarpEmulatorTest, MmaIsThePlainProduct) {
  float A[16][16], B[16][8];
  for (int r = 0; r < 16; ++r) {
    for (int k = 0; k < 16; ++k) A[r][k] = static_cast<float>((r * 7 + k * 3) % 11 - 5);
  }
  for (int k = 0; k < 16; ++k) {
    for (int n = 0; n < 8; ++n) B[k][n] = static_cast<float>((k * 5 + n * 13) % 9 - 4);
  }
  float D[16][8];
  std::memset(D, 0xff, sizeof(D));  // NaN
  RunGrid(1, 32, 0, [&] {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const uint32_t a[4] = {
        Pack(A[g][2 * t], A[g][2 * t + 1]), Pack(A[g + 8][2 * t], A[g + 8][2 * t + 1]),
        Pack(A[g][2 * t + 8], A[g][2 * t + 9]), Pack(A[g + 8][2 * t + 8], A[g + 8][2 * t + 9])};
    const uint32_t b[2] = {Pack(B[2 * t][g], B[2 * t + 1][g]),
                           Pack(B[2 * t + 8][g], B[2 * t + 9][g])};
    float d[4] = {1.0f, 1.0f, 1.0f, 1.0f};  // accumulates onto 1
    MmaM16N8K16Bf16(d, a, b);
    D[g][2 * t] = d[0];
    D[g][2 * t + 1] = d[1];
    D[g + 8][2 * t] = d[2];
    D[g + 8][2 * t + 1] = d[3];
  });
  for (int r = 0; r < 16; ++r) {
    for (int n = 0; n < 8; ++n) {
      double want = 1.0;
      for (int k = 0; k < 16; ++k) want += double{A[r][k]} * B[k][n];
      EXPECT_EQ(D[r][n], want) << r << "," << n;
    }
  }
}

// ldmatrix.x4 as the PTX ISA draws it: lane i gives row i % 8 of matrix
// i / 8; lane l receives (row l/4, columns 2(l%4), +1) of each matrix, or
// with .trans (rows 2(l%4), +1 of column l/4).
TEST_F(WarpEmulatorTest, LdMatrixHandsOutTheIsaFragments) {
  // Four 8×8 matrices of u16, matrix j's (row, col) = 1000·j + 10·row + col,
  // rows 24 bytes apart (padded), the matrices one after another.
  auto* h = reinterpret_cast<uint16_t*>(smem);
  constexpr int kRow = 12;  // u16 a row
  uint32_t got[2][32][4];
  for (int trans = 0; trans < 2; ++trans) {
    RunGrid(1, 32, 8 * 4 * kRow * 2, [&] {
      const int lane = threadIdx.x % 32;
      for (int row = 0; row < 8; ++row) {  // lane 8j + row writes its row
        if (lane % 8 == row) {
          for (int col = 0; col < 8; ++col) {
            h[lane * kRow + col] = static_cast<uint16_t>(1000 * (lane / 8) + 10 * row + col);
          }
        }
      }
      __syncwarp();
      uint32_t r[4];
      LdMatrixX4(r, static_cast<uint32_t>(lane * kRow * 2), trans == 1);
      for (int j = 0; j < 4; ++j) got[trans][lane][j] = r[j];
    });
  }
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int j = 0; j < 4; ++j) {
      auto at = [&](int row, int col) { return static_cast<uint32_t>(1000 * j + 10 * row + col); };
      EXPECT_EQ(got[0][lane][j], at(g, 2 * t) | at(g, 2 * t + 1) << 16) << lane << "," << j;
      EXPECT_EQ(got[1][lane][j], at(2 * t, g) | at(2 * t + 1, g) << 16) << lane << "," << j;
    }
  }
}

TEST_F(WarpEmulatorTest, ShufflesReadTheNamedLane) {
  std::vector<int> x(64), u(64), d(64), i(64);
  RunGrid(1, 64, 0, [&] {
    const int tid = threadIdx.x, v = 100 * tid;
    x[tid] = __shfl_xor_sync(0xffffffffu, v, 5);
    u[tid] = __shfl_up_sync(0xffffffffu, v, 3);
    d[tid] = __shfl_down_sync(0xffffffffu, v, 2);
    i[tid] = __shfl_sync(0xffffffffu, v, 7);
  });
  for (int t = 0; t < 64; ++t) {
    const int lane = t % 32, base = t - lane;
    EXPECT_EQ(x[t], 100 * (base + (lane ^ 5)));
    EXPECT_EQ(u[t], 100 * (lane >= 3 ? t - 3 : t));  // out of range: own value
    EXPECT_EQ(d[t], 100 * (lane < 30 ? t + 2 : t));
    EXPECT_EQ(i[t], 100 * (base + 7));
  }
}

// Warp 1 writes what warp 0 reads. With the barrier every schedule gives the
// values; without it the schedules disagree (in order, warp 0 reads before
// warp 1 has written: NaN).
std::vector<float> RunHandOff(Schedule s, bool barrier) {
  SetSchedule(s, 7);
  std::vector<float> out(32, 0.0f);
  RunGrid(2, 64, 32 * sizeof(float), [&] {
    const int tid = threadIdx.x;
    if (tid >= 32) smem[tid - 32] = static_cast<float>(tid + blockIdx.x);
    if (barrier) __syncthreads();
    if (tid < 32) out[tid] += smem[31 - tid];
  });
  return out;
}

TEST_F(WarpEmulatorTest, ARaceShowsAsSchedulesThatDisagree) {
  for (Schedule s : {Schedule::kInOrder, Schedule::kReverse, Schedule::kShuffled}) {
    const std::vector<float> out = RunHandOff(s, true);
    for (int t = 0; t < 32; ++t) EXPECT_EQ(out[t], 2.0f * (63 - t) + 1.0f) << t;
  }
  const std::vector<float> in_order = RunHandOff(Schedule::kInOrder, false);
  const std::vector<float> reverse = RunHandOff(Schedule::kReverse, false);
  EXPECT_TRUE(std::isnan(in_order[0]));
  EXPECT_EQ(reverse[0], 2.0f * 63 + 1.0f);
}

// A thread's copy lands at its wait: read before, the old contents (NaN).
TEST_F(WarpEmulatorTest, CpAsyncLandsAtTheWait) {
  alignas(16) static float src[4] = {1, 2, 3, 4};
  float before = 0.0f, after = 0.0f, zero = 1.0f;
  RunGrid(1, 32, 64, [&] {
    if (threadIdx.x == 0) {
      CpAsync16(SmemAddr(smem), src, true);
      CpAsync16(SmemAddr(smem + 4), src, false);
      CpAsyncCommit();
      before = smem[2];
      CpAsyncWait<0>();
      after = smem[2];
      zero = smem[5];
    }
  });
  EXPECT_TRUE(std::isnan(before));
  EXPECT_EQ(after, 3.0f);
  EXPECT_EQ(zero, 0.0f);
}

using WarpEmulatorDeathTest = WarpEmulatorTest;

TEST_F(WarpEmulatorDeathTest, ALaneThatSkipsAShuffleAborts) {
  EXPECT_DEATH(RunGrid(1, 32, 0,
                       [] {
                         const int lane = threadIdx.x % 32;
                         int v = lane;
                         if (lane > 0) v = __shfl_up_sync(0xffffffffu, v, 1);
                         (void)__shfl_xor_sync(0xffffffffu, v, 1);
                       }),
               "skipped a shuffle");
}

TEST_F(WarpEmulatorDeathTest, ABarrierSomeThreadsNeverReachAborts) {
  EXPECT_DEATH(RunGrid(1, 64, 0,
                       [] {
                         if (threadIdx.x >= 32) return;
                         __syncthreads();
                       }),
               "32 of 64 threads have returned");
}

TEST_F(WarpEmulatorDeathTest, AWritePastTheBlocksSharedMemoryAborts) {
  EXPECT_DEATH(RunGrid(1, 32, 64, [] { smem[threadIdx.x] = 1.0f; }), "past the 64 bytes");
  RunGrid(1, 32, 128, [] { smem[threadIdx.x] = 1.0f; });  // 32 floats: within
}

TEST_F(WarpEmulatorDeathTest, MisalignedOrUnawaitedCpAsyncAborts) {
  alignas(16) static float src[8] = {};
  EXPECT_DEATH(RunGrid(1, 32, 64, [] { CpAsync16(SmemAddr(smem), src + 1, true); }),
               "16-byte aligned");
  EXPECT_DEATH(RunGrid(1, 32, 64,
                       [] {
                         CpAsync16(SmemAddr(smem), src, true);
                         CpAsyncCommit();
                       }),
               "never waited for");
}

}  // namespace
}  // namespace gtp::emu
