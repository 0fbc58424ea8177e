#include "layers/sharded_param.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/counting.h"
#include "comm/local/local_communicator.h"
#include "core/kernels/fp8/block_quant.h"
#include "core/kernels/ops.h"
#include "core/philox.h"
#include "gtest/gtest.h"

namespace gtp::layers {
namespace {

// Value of element (r, c) of the global test weight of param `name`.
float W(const std::string& name, int64_t r, int64_t c, int64_t cols) {
  return PhiloxNormal(KeyFromName(name), r * cols + c);
}

// Element i of an f32 or bf16 host tensor, set from / read as f32.
void SetF32(const Tensor& t, int64_t i, float v) {
  if (t.dtype() == DType::kF32) {
    t.data<float>()[i] = v;
  } else {
    t.data<bf16>()[i] = ToBF16(v);
  }
}
float GetF32(const Tensor& t, int64_t i) {
  return t.dtype() == DType::kF32 ? t.data<float>()[i] : ToF32(t.data<bf16>()[i]);
}

// Fills this rank's shard of a [rows, cols] weight from the global weight.
void FillShard(ShardedParam& p) {
  float* s = p.shard().data<float>();
  for (int64_t r = 0; r < p.shard_rows(); ++r) {
    const int64_t gr = p.shard_row_begin() + r;
    for (int64_t c = 0; c < p.cols(); ++c)
      s[r * p.cols() + c] = gr < p.rows() ? W(p.name(), gr, c, p.cols()) : 0.0f;
  }
}

struct Case {
  int gtp;
  int64_t rows, cols, alignment;
};

class ShardedParamTest : public ::testing::TestWithParam<Case> {};

TEST_P(ShardedParamTest, GatherReturnsGlobalWeightAndReduceScatterMeans) {
  const Case k = GetParam();
  HeapAllocator host;  // shared by the rank threads: thread-safe
  absl::Status st = comm::RunRanks(k.gtp, [&](comm::Communicator& c) {
    GtpOptions opt;
    opt.alignment = k.alignment;
    GtpChain chain(kernels::Exec::Cpu(host), opt);
    ShardedParam p("w", k.rows, k.cols, DType::kF32, &c, &chain);
    EXPECT_EQ(p.padded_rows() % (k.gtp * k.alignment), 0);
    EXPECT_GE(p.padded_rows(), k.rows);
    EXPECT_LT(p.padded_rows() - k.rows, k.gtp * k.alignment);
    FillShard(p);
    for (Direction dir : {Direction::kForward, Direction::kBackward}) {
      auto full = p.Materialize(dir);
      ASSERT_TRUE(full.ok()) << full.status();
      ASSERT_EQ(full->shape(), Shape({k.rows, k.cols}));
      for (int64_t r = 0; r < k.rows; ++r)
        for (int64_t col = 0; col < k.cols; ++col)
          ASSERT_EQ(full->data<float>()[r * k.cols + col], W("w", r, col, k.cols));
      p.Release(dir);
    }
    // Rank g contributes (g + 1)·G; the mean over ranks is (gtp + 1)/2·G.
    for (int step = 0; step < 2; ++step) {
      bool fresh = false;
      Tensor g = p.Wgrad(&fresh);
      // A fresh buffer is written; with GTP = 1 the wgrad is the main grad
      // itself and contributions accumulate.
      EXPECT_EQ(fresh, k.gtp > 1);
      for (int64_t r = 0; r < k.rows; ++r)
        for (int64_t col = 0; col < k.cols; ++col) {
          float& d = g.data<float>()[r * k.cols + col];
          d = (fresh ? 0.0f : d) + (c.rank() + 1) * W("g", r, col, k.cols);
        }
      ASSERT_TRUE(p.ReduceGrad().ok());
      ASSERT_TRUE(chain.FinishBackward().ok());
    }
    const float* mg = p.main_grad().data<float>();
    for (int64_t r = 0; r < p.shard_rows(); ++r) {
      const int64_t gr = p.shard_row_begin() + r;
      for (int64_t col = 0; col < k.cols; ++col) {
        const float want = gr < k.rows ? 2 * (k.gtp + 1) / 2.0f * W("g", gr, col, k.cols) : 0.0f;
        ASSERT_NEAR(mg[r * k.cols + col], want, 1e-5f * (1 + std::abs(want))) << r << "," << col;
      }
    }
  });
  ASSERT_TRUE(st.ok()) << st;
}

// FP8 gather: the gathered weight is the MXFP8 round trip of each rank's
// shard (the CPU kernels' values, exactly), for f32 and bf16 params; the wire
// holds n e4m3 codes + ceil(n/32) E8M0 scale bytes (counted by
// CountingCommunicator), about 0.52× bf16's and 0.26× f32's; quantised once
// until MarkUpdated.
TEST(ShardedParamFp8, GatherIsTheBlockwiseRoundTripAtAQuarterOfTheBytes) {
  for (DType dt : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dt));
    for (int gtp : {2, 4}) {
      SCOPED_TRACE(gtp);
      HeapAllocator host;
      auto counter = std::make_shared<comm::ByteCounter>();
      const int64_t rows = 37, cols = 24;  // shards of 19·24 / 10·24: partial 32-blocks
      absl::Status st = comm::RunRanks(gtp, [&](comm::Communicator& inner) {
        comm::CountingCommunicator c(&inner, counter);
        const kernels::Exec e = kernels::Exec::Cpu(host);
        GtpOptions opt;
        opt.fp8_gather = true;
        GtpChain chain(e, opt);
        ShardedParam p("w", rows, cols, dt, &c, &chain);
        // Host tensors of the param dtype from f32 values, and back.
        for (int64_t r = 0; r < p.shard_rows(); ++r) {
          const int64_t gr = p.shard_row_begin() + r;
          for (int64_t col = 0; col < cols; ++col)
            SetF32(p.shard(), r * cols + col, gr < rows ? 3 * W("w", gr, col, cols) : 0.0f);
        }
        p.MarkUpdated();
        // The expected weight: every rank's shard through the CPU kernels.
        const int64_t n = p.shard_rows() * cols, blocks = (n + 31) / 32;
        std::vector<float> want(p.padded_rows() * cols);
        for (int g = 0; g < gtp; ++g) {
          Tensor x = Tensor::Zeros({n}, dt, host);
          for (int64_t i = 0; i < n; ++i) {
            const int64_t gr = g * p.shard_rows() + i / cols, col = i % cols;
            SetF32(x, i, gr < rows ? 3 * W("w", gr, col, cols) : 0.0f);
          }
          Tensor q = Tensor::Zeros({n}, DType::kU8, host),
                 sc = Tensor::Zeros({blocks}, DType::kU8, host);
          Tensor y = Tensor::Zeros({n}, dt, host);
          kernels::ops::QuantizeFp8Blockwise(e, x, q, sc);
          kernels::ops::DequantizeFp8Blockwise(e, q, sc, y);
          for (int64_t i = 0; i < n; ++i) want[g * n + i] = GetF32(y, i);
        }
        for (int round = 0; round < 2; ++round) {
          for (Direction dir : {Direction::kForward, Direction::kBackward}) {
            auto full = p.Materialize(dir);
            ASSERT_TRUE(full.ok()) << full.status();
            for (int64_t i = 0; i < rows * cols; ++i) {
              const float got = GetF32(*full, i), exact = 3 * W("w", i / cols, i % cols, cols);
              ASSERT_EQ(got, want[i]) << i;
              ASSERT_NEAR(got, exact, 0.07 * std::abs(exact) + 0.05) << i;
            }
            p.Release(dir);
          }
        }
        EXPECT_EQ(p.gather_wire_bytes(), n + blocks);  // e4m3 codes + E8M0 scale bytes
      });
      ASSERT_TRUE(st.ok()) << st;
      // 2 rounds × 2 directions × gtp ranks, each sending its packed shard.
      const comm::ByteCounts b = counter->Snapshot();
      const int64_t shard_rows = PaddedRows(rows, gtp, 1) / gtp, n = shard_rows * cols;
      const int64_t wire = n + (n + 31) / 32;
      EXPECT_EQ(b[comm::OpKind::kAllGather], 4 * gtp * wire);
      const double vs_bf16 = static_cast<double>(wire) / (2.0 * n);
      EXPECT_LE(vs_bf16, 0.55);  // the project's target for fp8 gathers
      std::printf(
          "fp8 gather, %s gtp %d: %lld wire bytes per shard of %lld elements (%.4f x bf16)\n",
          DTypeName(dt), gtp, static_cast<long long>(wire), static_cast<long long>(n), vs_bf16);
    }
  }
}

// The FP8 GEMM's weight gathered as 128×128 tiles (UseFp8TileGather): on
// GTP 2 and 4 with shards of whole tiles (rows 384 and 512; 400 leaves a
// partial last tile) the gathered codes and scales are exactly the CPU's
// QuantizeBlocks of the whole bf16 weight (a tile of the weight is a tile of
// one shard), after every update (the shard re-quantised once per update),
// for a bit over half bf16's bytes. Shards that are not whole tiles (GTP 2
// of 200 rows: 100-row shards) or a GTP of 1 leave the param as it was.
TEST(ShardedParamFp8Tiles, GatheredTilesAreTheWholeWeightsQuantisation) {
  namespace fp8 = kernels::fp8;
  const fp8::Fp8Layout tiles = fp8::Fp8Layout::kTile128x128;
  struct TileCase {
    int gtp;
    int64_t rows, cols;
  };
  for (const TileCase k : {TileCase{2, 384, 160}, TileCase{4, 512, 144}, TileCase{2, 400, 128}}) {
    SCOPED_TRACE(absl::StrCat("gtp ", k.gtp, " rows ", k.rows));
    HeapAllocator host;
    auto counter = std::make_shared<comm::ByteCounter>();
    absl::Status st = comm::RunRanks(k.gtp, [&](comm::Communicator& inner) {
      comm::CountingCommunicator c(&inner, counter);
      const kernels::Exec e = kernels::Exec::Cpu(host);
      GtpOptions opt;
      opt.alignment = 128;  // 400 rows pad to 512: shards of 256, the last tile partial
      GtpChain chain(e, opt);
      ShardedParam p("w", k.rows, k.cols, DType::kBF16, &c, &chain);
      ASSERT_TRUE(p.UseFp8TileGather());
      for (int update = 0; update < 2; ++update) {
        const float scale = update == 0 ? 1.0f : -3.0f;
        for (int64_t r = 0; r < p.shard_rows(); ++r) {
          const int64_t gr = p.shard_row_begin() + r;
          for (int64_t col = 0; col < k.cols; ++col) {
            SetF32(p.shard(), r * k.cols + col,
                   gr < k.rows ? scale * W("w", gr, col, k.cols) : 0.0f);
          }
        }
        p.MarkUpdated();
        // The whole weight, quantised on one rank.
        Tensor w = Tensor::Zeros({k.rows, k.cols}, DType::kBF16, host);
        for (int64_t i = 0; i < k.rows * k.cols; ++i)
          SetF32(w, i, scale * W("w", i / k.cols, i % k.cols, k.cols));
        Tensor q = Tensor::Zeros({k.rows, k.cols}, DType::kF8E4M3, host);
        Tensor sc = Tensor::Zeros(fp8::Fp8ScaleShape(k.rows, k.cols, tiles), DType::kF32, host);
        fp8::QuantizeBlocks(e, w, tiles, q, sc);
        for (Direction dir : {Direction::kForward, Direction::kBackward}) {
          auto got = p.MaterializeFp8(dir);
          ASSERT_TRUE(got.ok()) << got.status();
          ASSERT_EQ(got->q.shape(), q.shape());
          ASSERT_EQ(got->scales.shape(), sc.shape());
          EXPECT_EQ(got->layout, tiles);
          const uint8_t* gq = static_cast<const uint8_t*>(got->q.raw_data());
          const uint8_t* wq = static_cast<const uint8_t*>(q.raw_data());
          for (int64_t i = 0; i < q.numel(); ++i) ASSERT_EQ(gq[i], wq[i]) << "code " << i;
          for (int64_t i = 0; i < sc.numel(); ++i)
            ASSERT_EQ(got->scales.data<float>()[i], sc.data<float>()[i]) << "scale " << i;
          p.Release(dir);
        }
      }
    });
    ASSERT_TRUE(st.ok()) << st;
    // 2 updates × 2 directions × gtp ranks, each sending its codes and scales.
    const int64_t shard_rows = PaddedRows(k.rows, k.gtp, 128) / k.gtp;
    const int64_t per_rank = shard_rows * k.cols + 4 * (shard_rows / 128) * ((k.cols + 127) / 128);
    EXPECT_EQ(counter->Snapshot()[comm::OpKind::kAllGather], 4 * k.gtp * per_rank);
    EXPECT_LE(static_cast<double>(per_rank) / (2.0 * shard_rows * k.cols), 0.51);
  }
  // Not whole tiles, or nothing to gather: the param stays as it was.
  HeapAllocator host;
  absl::Status st = comm::RunRanks(2, [&](comm::Communicator& c) {
    GtpChain chain(kernels::Exec::Cpu(host), GtpOptions{});
    ShardedParam p("w", 200, 64, DType::kBF16, &c, &chain);
    EXPECT_FALSE(p.UseFp8TileGather());
    EXPECT_FALSE(p.fp8_tiles());
  });
  ASSERT_TRUE(st.ok()) << st;
  GtpChain chain(kernels::Exec::Cpu(host), GtpOptions{});
  ShardedParam one("w", 256, 64, DType::kBF16, nullptr, &chain);
  EXPECT_FALSE(one.UseFp8TileGather());
}

// FP8 gather at GTP 1: nothing travels, but the weight takes the same MXFP8
// round trip, so one rank computes exactly what GTP 2 and GTP 4 do when their
// shards are whole 32-blocks (32 rows × 24: shards of 384 and 192 elements),
// at every use, and the round trip follows the shard's updates.
TEST(ShardedParamFp8, OneRankTakesTheShardedLayoutsRoundTrip) {
  const int64_t rows = 32, cols = 24;
  auto value = [&](int64_t gr, int64_t col, float scale) { return scale * W("w", gr, col, cols); };
  // The materialised weight of every rank 0 of a GTP-`gtp` group, for two
  // successive shard values (scale 3, then 5 after MarkUpdated).
  auto weights = [&](int gtp) {
    std::vector<std::vector<float>> out(2);
    HeapAllocator host;
    absl::Status st = comm::RunRanks(gtp, [&](comm::Communicator& c) {
      GtpOptions opt;
      opt.fp8_gather = true;
      GtpChain chain(kernels::Exec::Cpu(host), opt);
      ShardedParam p("w", rows, cols, DType::kF32, &c, &chain);
      for (int round = 0; round < 2; ++round) {
        for (int64_t r = 0; r < p.shard_rows(); ++r)
          for (int64_t col = 0; col < cols; ++col)
            p.shard().data<float>()[r * cols + col] =
                value(p.shard_row_begin() + r, col, round == 0 ? 3.0f : 5.0f);
        p.MarkUpdated();
        for (Direction dir : {Direction::kForward, Direction::kBackward}) {
          auto full = p.Materialize(dir);
          ASSERT_TRUE(full.ok()) << full.status();
          if (c.rank() == 0 && dir == Direction::kForward) {
            out[round].assign(full->data<float>(), full->data<float>() + rows * cols);
          }
          p.Release(dir);
        }
      }
    });
    EXPECT_TRUE(st.ok()) << st;
    return out;
  };
  const auto one = weights(1);
  ASSERT_EQ(one[0].size(), static_cast<size_t>(rows * cols));
  for (int gtp : {2, 4}) EXPECT_EQ(weights(gtp), one) << "GTP " << gtp;
  // The round trip happened (e4m3 keeps 3 mantissa bits) and followed the update.
  int64_t rounded = 0;
  for (int round = 0; round < 2; ++round) {
    for (int64_t i = 0; i < rows * cols; ++i) {
      const float exact = value(i / cols, i % cols, round == 0 ? 3.0f : 5.0f);
      ASSERT_NEAR(one[round][i], exact, 0.07 * std::abs(exact) + 0.05) << i;
      rounded += one[round][i] != exact;
    }
  }
  EXPECT_GT(rounded, rows * cols);
}

// NVFP4 gather: the gathered weight is each rank's shard through the CPU
// codec (ops::EncodeNvfp4 / DecodeNvfp4), exactly, for f32 and bf16 params;
// the wire holds kernels::Nvfp4WireBytes(n) bytes per shard (an f32 scale,
// n/2 code bytes, n/16 scale bytes, padded to 16), under 0.3× bf16's; the
// values are NVFP4's round trip of the weight (relative RMS error of a few
// per cent for these normal values: 3 bits per value); quantised once until
// MarkUpdated, and a second shard value is picked up after it.
TEST(ShardedParamNvfp4, GatherIsTheNvfp4RoundTripAtUnderAThirdOfBf16sBytes) {
  for (DType dt : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dt));
    for (int gtp : {1, 2, 4}) {
      SCOPED_TRACE(gtp);
      HeapAllocator host;
      auto counter = std::make_shared<comm::ByteCounter>();
      const int64_t rows = 37, cols = 64;  // shards of 19·64 / 10·64 elements
      double err2 = 0, ref2 = 0;
      absl::Status st = comm::RunRanks(gtp, [&](comm::Communicator& inner) {
        comm::CountingCommunicator c(&inner, counter);
        const kernels::Exec e = kernels::Exec::Cpu(host);
        GtpOptions opt;
        opt.nvfp4_gather = true;
        GtpChain chain(e, opt);
        ShardedParam p("w", rows, cols, dt, &c, &chain);
        const int64_t n = p.shard_rows() * cols, w = kernels::Nvfp4WireBytes(n);
        for (float scale : {3.0f, 5.0f}) {
          for (int64_t r = 0; r < p.shard_rows(); ++r) {
            const int64_t gr = p.shard_row_begin() + r;
            for (int64_t col = 0; col < cols; ++col)
              SetF32(p.shard(), r * cols + col, gr < rows ? scale * W("w", gr, col, cols) : 0.0f);
          }
          p.MarkUpdated();
          // The expected weight: every rank's shard through the CPU codec.
          std::vector<float> want(p.padded_rows() * cols);
          for (int g = 0; g < gtp; ++g) {
            Tensor x = Tensor::Zeros({n}, dt, host), y = Tensor::Zeros({n}, dt, host);
            Tensor wire = Tensor::Zeros({w}, DType::kU8, host);
            for (int64_t i = 0; i < n; ++i) {
              const int64_t gr = g * p.shard_rows() + i / cols, col = i % cols;
              SetF32(x, i, gr < rows ? scale * W("w", gr, col, cols) : 0.0f);
            }
            kernels::ops::EncodeNvfp4(e, x, wire);
            kernels::ops::DecodeNvfp4(e, wire, y);
            for (int64_t i = 0; i < n; ++i) want[g * n + i] = GetF32(y, i);
          }
          for (Direction dir : {Direction::kForward, Direction::kBackward}) {
            auto full = p.Materialize(dir);
            ASSERT_TRUE(full.ok()) << full.status();
            for (int64_t i = 0; i < rows * cols; ++i) {
              const double got = GetF32(*full, i), exact = scale * W("w", i / cols, i % cols, cols);
              ASSERT_EQ(got, want[i]) << i;
              if (c.rank() == 0) err2 += (got - exact) * (got - exact), ref2 += exact * exact;
            }
            p.Release(dir);
          }
        }
        EXPECT_EQ(p.gather_wire_bytes(), gtp == 1 ? 0 : w);
      });
      ASSERT_TRUE(st.ok()) << st;
      const double rel_rms = std::sqrt(err2 / ref2);
      // NVFP4 keeps 1 mantissa bit (e2m1) under an e4m3 scale per 16: a
      // relative RMS error of 5–15 % for normal data; none at all would mean
      // no round trip, more a wrong scale.
      EXPECT_TRUE(rel_rms > 0.03 && rel_rms < 0.15) << rel_rms;
      if (gtp == 1) continue;
      // 2 values × 2 directions × gtp ranks, each sending its wire.
      const comm::ByteCounts b = counter->Snapshot();
      const int64_t n = PaddedRows(rows, gtp, 1) / gtp * cols, wire = kernels::Nvfp4WireBytes(n);
      EXPECT_EQ(b[comm::OpKind::kAllGather], 4 * gtp * wire);
      const double vs_bf16 = static_cast<double>(wire) / (2.0 * n);
      EXPECT_LE(vs_bf16, 0.30);
      std::printf(
          "nvfp4 gather, %s gtp %d: %lld wire bytes per shard of %lld elements (%.4f x "
          "bf16), relative RMS error %.4f\n",
          DTypeName(dt), gtp, static_cast<long long>(wire), static_cast<long long>(n), vs_bf16,
          rel_rms);
    }
  }
}

// bf16 reduce-scatter (f32 accumulation): the main grad is the mean of the
// ranks' bf16-rounded wgrads, summed in f32 (the closed form, to bf16's
// rounding), at half the bytes of the f32 reduce-scatter.
TEST(ShardedParamBf16ReduceScatter, MeanOfRoundedContributionsAtHalfTheBytes) {
  for (int gtp : {2, 4}) {
    SCOPED_TRACE(gtp);
    HeapAllocator host;
    const int64_t rows = 37, cols = 24;
    for (bool bf16_wire : {false, true}) {
      auto counter = std::make_shared<comm::ByteCounter>();
      absl::Status st = comm::RunRanks(gtp, [&](comm::Communicator& inner) {
        comm::CountingCommunicator c(&inner, counter);
        GtpOptions opt;
        opt.bf16_reduce_scatter = bf16_wire;
        GtpChain chain(kernels::Exec::Cpu(host), opt);
        ShardedParam p("w", rows, cols, DType::kF32, &c, &chain);
        bool fresh = false;
        Tensor g = p.Wgrad(&fresh);
        ASSERT_TRUE(fresh);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t col = 0; col < cols; ++col)
            g.data<float>()[r * cols + col] = (c.rank() + 1) * W("g", r, col, cols);
        ASSERT_TRUE(p.ReduceGrad().ok());
        ASSERT_TRUE(chain.FinishBackward().ok());
        const float* mg = p.main_grad().data<float>();
        for (int64_t r = 0; r < p.shard_rows(); ++r) {
          const int64_t gr = p.shard_row_begin() + r;
          for (int64_t col = 0; col < cols; ++col) {
            const double want = gr < rows ? (gtp + 1) / 2.0 * W("g", gr, col, cols) : 0.0;
            const double tol =
                bf16_wire ? 4e-3 * std::abs(want) + 1e-6 : 1e-5 * (1 + std::abs(want));
            ASSERT_NEAR(mg[r * cols + col], want, tol) << r << "," << col;
          }
        }
      });
      ASSERT_TRUE(st.ok()) << st;
      const comm::ByteCounts b = counter->Snapshot();
      const int64_t shard = PaddedRows(rows, gtp, 1) / gtp * cols;
      if (bf16_wire) {
        EXPECT_EQ(b[comm::OpKind::kAllToAll], gtp * gtp * shard * 2);  // every rank: G pieces
        EXPECT_EQ(b[comm::OpKind::kReduceScatter], 0);
      } else {
        EXPECT_EQ(b[comm::OpKind::kReduceScatter], gtp * gtp * shard * 4);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, ShardedParamTest,
                         ::testing::Values(Case{1, 7, 5, 1}, Case{2, 8, 3, 1}, Case{4, 250, 3, 1},
                                           Case{4, 250, 2, 8}, Case{3, 10, 4, 2}));

// Runs `layers` params through one forward and one backward pass in chain
// order, as a model would, and returns rank 0's trace. `groups`: each
// param's prefetch group (empty: none).
std::vector<GtpTraceEvent> RunChain(int gtp, int layers, bool prefetch, std::vector<float>* grads,
                                    const std::vector<int>& groups = {}) {
  HeapAllocator host;
  std::vector<GtpTraceEvent> trace;
  absl::Status st = comm::RunRanks(gtp, [&](comm::Communicator& c) {
    GtpOptions opt;
    opt.weight_prefetch = prefetch;
    GtpChain chain(kernels::Exec::Cpu(host), opt);
    chain.set_tracing(true);
    std::vector<std::unique_ptr<ShardedParam>> ps;
    for (int i = 0; i < layers; ++i) {
      ps.push_back(std::make_unique<ShardedParam>("layer" + std::to_string(i), 6, 4, DType::kF32,
                                                  &c, &chain));
      FillShard(*ps.back());
      if (!groups.empty()) ps.back()->set_prefetch_group(groups[i]);
    }
    for (int iter = 0; iter < 2; ++iter) {
      for (auto& p : ps) {
        ASSERT_TRUE(p->Materialize(Direction::kForward).ok());
        p->Release(Direction::kForward);
      }
      for (int i = layers - 1; i >= 0; --i) {
        auto w = ps[i]->Materialize(Direction::kBackward);
        ASSERT_TRUE(w.ok());
        bool fresh = false;
        Tensor g = ps[i]->Wgrad(&fresh);
        for (int64_t j = 0; j < 24; ++j) g.data<float>()[j] = w->data<float>()[j] * (c.rank() + 1);
        ps[i]->Release(Direction::kBackward);
        ASSERT_TRUE(ps[i]->ReduceGrad().ok());
      }
      ASSERT_TRUE(chain.FinishBackward().ok());
    }
    if (c.rank() == 0) {
      trace = chain.trace();
      for (auto& p : ps)
        for (int64_t j = 0; j < p->main_grad().numel(); ++j)
          grads->push_back(p->main_grad().data<float>()[j]);
    }
  });
  EXPECT_TRUE(st.ok()) << st;
  return trace;
}

int64_t Seq(const std::vector<GtpTraceEvent>& t, GtpTraceEvent::Kind kind, const std::string& p,
            Direction dir, int nth = 0) {
  for (const auto& e : t)
    if (e.kind == kind && e.param == p && e.dir == dir && nth-- == 0) return e.seq;
  return -1;
}

TEST(GtpChain, PrefetchIssuesNextGatherBeforeCurrentGemm) {
  const int L = 5;
  std::vector<float> g_on, g_off;
  auto on = RunChain(2, L, /*prefetch=*/true, &g_on);
  for (Direction dir : {Direction::kForward, Direction::kBackward}) {
    int async_gathers = 0;
    for (int i = 0; i < L; ++i) {
      // In chain order for `dir`: the consumer before param i is its neighbour.
      const int prev = dir == Direction::kForward ? i - 1 : i + 1;
      if (prev < 0 || prev >= L) continue;
      const std::string name = "layer" + std::to_string(i);
      // The chain is recorded during the first forward, so forward prefetch
      // starts with the second iteration; backward prefetches from the first.
      for (int iter = dir == Direction::kForward ? 1 : 0; iter < 2; ++iter) {
        int64_t issued = Seq(on, GtpTraceEvent::kGatherIssued, name, dir, iter);
        EXPECT_TRUE(on[issued].async) << name;
        int64_t prev_used =
            Seq(on, GtpTraceEvent::kConsumed, "layer" + std::to_string(prev), dir, iter);
        ASSERT_GE(issued, 0);
        EXPECT_LT(issued, prev_used) << name << " " << DirectionName(dir) << " iter " << iter;
      }
    }
    for (const auto& e : on)
      if (e.kind == GtpTraceEvent::kGatherIssued && e.dir == dir && e.async) ++async_gathers;
    // L-1 prefetched gathers per direction per iteration (the head is cold);
    // none in the recording forward pass.
    EXPECT_EQ(async_gathers, (dir == Direction::kForward ? 1 : 2) * (L - 1)) << DirectionName(dir);
  }
  auto off = RunChain(2, L, /*prefetch=*/false, &g_off);
  for (const auto& e : off)
    if (e.kind == GtpTraceEvent::kGatherIssued) {
      EXPECT_FALSE(e.async) << e.param;
    }
  // Both schedules compute identical gradients.
  ASSERT_EQ(g_on.size(), g_off.size());
  for (size_t i = 0; i < g_on.size(); ++i) ASSERT_EQ(g_on[i], g_off[i]);
}

// A layer whose backward runs out of the chain's reverse order (a, then b,
// with b recorded after a in forward) makes b's backward prefetch a, which
// no backward then consumes. That gather holds a's weights from before the
// update; FinishBackward drops it, so the next step's backward of a gathers
// the updated weights. (A MoE block's shared expert once ran its backward
// after the routed experts: with expert GTP the next step's gradients came
// from the old expert weights, 0.8 % off in grad norm.)
TEST(GtpChain, UnconsumedBackwardPrefetchDoesNotOutliveTheStep) {
  HeapAllocator host;
  absl::Status st = comm::RunRanks(2, [&](comm::Communicator& c) -> absl::Status {
    const kernels::Exec e = kernels::Exec::Cpu(host);
    GtpChain chain(e, {});
    ShardedParam a("a", 4, 3, DType::kF32, &c, &chain), b("b", 4, 3, DType::kF32, &c, &chain);
    auto fill = [&](ShardedParam& p, float base) {
      for (int64_t i = 0; i < p.shard().numel(); ++i) {
        p.shard().data<float>()[i] = base + 100.0f * c.rank() + static_cast<float>(i);
      }
      p.MarkUpdated();
    };
    fill(a, 1.0f);
    fill(b, 1.0f);
    for (ShardedParam* p : {&a, &b}) {
      GTP_RETURN_IF_ERROR(p->Materialize(Direction::kForward).status());
      p->Release(Direction::kForward);
    }
    // Backward out of order: a first, then b (whose neighbour before it is a).
    for (ShardedParam* p : {&a, &b}) {
      GTP_RETURN_IF_ERROR(p->Materialize(Direction::kBackward).status());
      p->Release(Direction::kBackward);
    }
    GTP_RETURN_IF_ERROR(chain.FinishBackward());
    if (a.gather_state(Direction::kBackward) != CommState::kNone) {
      return absl::InternalError("a backward gather outlived FinishBackward");
    }
    fill(a, 1000.0f);  // the optimizer's update
    GTP_ASSIGN_OR_RETURN(Tensor w, a.Materialize(Direction::kBackward));
    // Row r of the gathered weight: rank r / 2's shard row r % 2.
    for (int64_t r = 0; r < 4; ++r) {
      for (int64_t col = 0; col < 3; ++col) {
        const float want =
            1000.0f + 100.0f * static_cast<float>(r / 2) + static_cast<float>((r % 2) * 3 + col);
        if (w.data<float>()[r * 3 + col] != want) {
          return absl::InternalError(absl::StrCat("a[", r, ", ", col,
                                                  "] = ", w.data<float>()[r * 3 + col],
                                                  ", want the updated ", want));
        }
      }
    }
    a.Release(Direction::kBackward);
    return absl::OkStatus();
  });
  EXPECT_TRUE(st.ok()) << st;
}

TEST(GtpChain, PrefetchGroupIsIssuedTogetherOneParamAhead) {
  // layer2 and layer3 form a group (a MoE layer's fc1 and fc2).
  const int L = 5;
  const std::vector<int> groups = {-1, -1, 7, 7, -1};
  std::vector<float> g_on, g_off;
  auto on = RunChain(2, L, /*prefetch=*/true, &g_on, groups);
  // Forward (second iteration): layer1 prefetches layer2 and layer3 both,
  // before its own GEMM; backward (both iterations): layer4 prefetches
  // layer3 and layer2.
  const int64_t l1_used = Seq(on, GtpTraceEvent::kConsumed, "layer1", Direction::kForward, 1);
  for (const char* p : {"layer2", "layer3"}) {
    const int64_t issued = Seq(on, GtpTraceEvent::kGatherIssued, p, Direction::kForward, 1);
    ASSERT_GE(issued, 0) << p;
    EXPECT_TRUE(on[issued].async) << p;
    EXPECT_LT(issued, l1_used) << p;
  }
  for (int iter = 0; iter < 2; ++iter) {
    const int64_t l4_used = Seq(on, GtpTraceEvent::kConsumed, "layer4", Direction::kBackward, iter);
    for (const char* p : {"layer3", "layer2"}) {
      const int64_t issued = Seq(on, GtpTraceEvent::kGatherIssued, p, Direction::kBackward, iter);
      ASSERT_GE(issued, 0) << p;
      EXPECT_TRUE(on[issued].async) << p;
      EXPECT_LT(issued, l4_used) << p << " iter " << iter;
    }
    // Outside the group prefetching stays one ahead: layer1 after layer3's use.
    EXPECT_GT(Seq(on, GtpTraceEvent::kGatherIssued, "layer1", Direction::kBackward, iter),
              Seq(on, GtpTraceEvent::kConsumed, "layer3", Direction::kBackward, iter));
  }
  RunChain(2, L, /*prefetch=*/false, &g_off);
  ASSERT_EQ(g_on.size(), g_off.size());
  for (size_t i = 0; i < g_on.size(); ++i) ASSERT_EQ(g_on[i], g_off[i]);
}

TEST(GtpChain, AsyncReductionDefersFinalisationByOneParam) {
  std::vector<float> grads;
  auto t = RunChain(2, 4, true, &grads);
  // layer3's reduction (first in backward) is finalised only after layer2's was issued.
  EXPECT_LT(Seq(t, GtpTraceEvent::kReduceIssued, "layer2", Direction::kBackward),
            Seq(t, GtpTraceEvent::kReduceFinalized, "layer3", Direction::kBackward));
  EXPECT_GT(Seq(t, GtpTraceEvent::kReduceFinalized, "layer3", Direction::kBackward),
            Seq(t, GtpTraceEvent::kReduceIssued, "layer3", Direction::kBackward));
}

}  // namespace
}  // namespace gtp::layers
