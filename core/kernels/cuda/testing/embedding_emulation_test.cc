// The embedding's CUDA kernels (core/kernels/cuda/embedding.cu: the gather,
// and the backward that sorts the rows by token and adds each token's
// segment in a fixed order; cub's radix sort replaced on the host by a stable
// sort, which orders alike) run on the CPU by the warp emulator
// (core/kernels/cuda/testing/warp_emulator.h), in three orders of each
// block's threads, against the CPU kernels (core/kernels/cpu.h) bit for bit
// (both add a token's rows in position order). The CPU kernels are
// themselves checked against references (core/kernels/cpu). embedding_gpu_test
// runs the same kernels on a GPU.
// The emulator before the kernel source:
// clang-format off
#define GTP_CUDA_HOST_EMULATION
#include "core/kernels/cuda/testing/warp_emulator.h"
#include "core/kernels/cuda/embedding.cu"
// clang-format on
// (its launchers now run the grids on the host, synchronously)

#include <cstdint>
#include <random>
#include <vector>

#include "core/kernels/cpu.h"
#include "core/kernels/cuda/testing/emulation_checks.h"
#include "gtest/gtest.h"

namespace gtp::kernels::cuda {
namespace {

alignas(16) double smem[1024];  // the blocks' dynamic shared memory (these kernels take none)

using FVec = std::vector<float>;

struct Case {
  int64_t N, V, C, vocab_start;
};

// Ids over the shard and outside it (another rank's rows), one id in every
// third position (a segment longer than a block's pass).
std::vector<int32_t> Ids(const Case& c) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(c.vocab_start + c.V + 3));
  std::vector<int32_t> idx(c.N);
  for (int64_t i = 0; i < c.N; ++i) {
    idx[i] = i % 3 == 0 ? static_cast<int32_t>(c.vocab_start + 1) : id(rng);
  }
  return idx;
}

template <class T>
void RunCase(const Case& c) {
  gtp::emu::SetShared(smem, sizeof(smem));
  const std::vector<int32_t> idx = Ids(c);
  const std::vector<T> table = gtp::emu::Converted<T>(gtp::emu::RandomNormal(c.V * c.C, 1));
  const std::vector<T> dout = gtp::emu::Converted<T>(gtp::emu::RandomNormal(c.N * c.C, 2));
  const FVec dtable0 = gtp::emu::RandomNormal(c.V * c.C, 3);
  std::vector<T> want_out(c.N * c.C);
  FVec want_dtable = dtable0;
  cpu::EmbeddingForward(idx.data(), table.data(), want_out.data(), c.N, c.V, c.C, c.vocab_start);
  cpu::EmbeddingBackward(idx.data(), dout.data(), want_dtable.data(), c.N, c.V, c.C, c.vocab_start);
  const auto out = gtp::emu::InEverySchedule([&] {
    std::vector<T> o(c.N * c.C);
    FVec dtable = dtable0;
    std::vector<char> scratch(EmbeddingBackwardScratchBytes(c.N, c.V) + 16);
    void* scratch16 =
        reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(scratch.data()) + 15) / 16 * 16);
    EmbeddingForward(idx.data(), table.data(), o.data(), c.N, c.V, c.C, c.vocab_start, nullptr);
    EmbeddingBackward(idx.data(), dout.data(), dtable.data(), c.N, c.V, c.C, c.vocab_start, nullptr,
                      scratch16);
    return std::vector<FVec>{gtp::emu::Widened(o), dtable};
  });
  EXPECT_TRUE(gtp::emu::SameBits(out[0], gtp::emu::Widened(want_out), "out"));
  EXPECT_TRUE(gtp::emu::SameBits(out[1], want_dtable, "dtable"));
}

class EmbeddingEmulationTest : public ::testing::TestWithParam<Case> {};

TEST_P(EmbeddingEmulationTest, F32MatchesTheCpuBitForBit) { RunCase<float>(GetParam()); }
TEST_P(EmbeddingEmulationTest, Bf16MatchesTheCpuBitForBit) { RunCase<bf16>(GetParam()); }

// C a multiple of the 16-byte vector (8) and not; a shard starting past 0;
// a frequent id's segment of ~N/3 rows; bf16 rows of 2 (C = 24, 16), 4
// (C = 1032) and 8 columns a thread (C = 4104: more chunks than threads).
INSTANTIATE_TEST_SUITE_P(Shapes, EmbeddingEmulationTest,
                         ::testing::Values(Case{300, 40, 24, 0}, Case{200, 30, 13, 10},
                                           Case{1500, 64, 16, 0}, Case{60, 12, 1032, 0},
                                           Case{40, 6, 4104, 2}));

}  // namespace
}  // namespace gtp::kernels::cuda
