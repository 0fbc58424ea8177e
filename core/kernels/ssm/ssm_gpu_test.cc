// The CUDA Mamba-2 ops (ssd_scan.cu and mamba_ops.cu, behind ssd_scan.h and mamba_ops.h) against
// their CPU implementations (which the CPU tests check against double
// references): forward values and every gradient on random inputs, relative
// to the largest reference value; outputs NaN-poisoned before each call;
// two runs bit-identical; parameter gradients accumulate into random initial
// values. Skips without a GPU.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/cuda_runtime.h"
#include "core/kernels/ops.h"
#include "core/kernels/ssm/mamba_ops.h"
#include "core/kernels/ssm/ssd_scan.h"
#include "core/kernels/ssm/testing/ssd_reference.h"
#include "core/kernels/testing/gpu.h"
#include "core/philox.h"
#include "gtest/gtest.h"

namespace gtp::kernels::ssm {
namespace {

using testing::BitEqual;
using testing::DeviceBuffer;
using Vec = std::vector<float>;

Vec Random(int64_t n, uint64_t key, float scale = 1.0f, float offset = 0.0f) {
  Vec v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = offset + scale * PhiloxNormal(key, i);
  return v;
}

int64_t Numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// Host tensors for the CPU path, device buffers (NaN-poisoned unless
// uploaded) for the CUDA path.
class Env {
 public:
  Env() : stream_(testing::TestStream()), gpu_alloc_(0) {
    cpu = Exec::Cpu(heap_);
    gpu = Exec{Device::Cuda(0), &gpu_alloc_, stream_.get(), nullptr, nullptr};
  }
  Tensor Host(Vec& v, const Shape& s) {
    return Tensor::Wrap(v.data(), s, DType::kF32, Device::Cpu());
  }
  Tensor Up(const Vec& v, const Shape& s) {
    bufs_.push_back(std::make_unique<DeviceBuffer<float>>(v));
    return Tensor::Wrap(bufs_.back()->get(), s, DType::kF32, Device::Cuda(0));
  }
  Tensor Poisoned(const Shape& s) {
    bufs_.push_back(std::make_unique<DeviceBuffer<float>>(static_cast<size_t>(Numel(s))));
    return Tensor::Wrap(bufs_.back()->get(), s, DType::kF32, Device::Cuda(0));
  }
  Vec Down(const Tensor& t) {
    GTP_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
    Vec v(static_cast<size_t>(t.numel()));
    if (!v.empty())
      GTP_CUDA_CHECK(
          cudaMemcpy(v.data(), t.data<float>(), v.size() * sizeof(float), cudaMemcpyDeviceToHost));
    return v;
  }

  Exec cpu, gpu;

 private:
  HeapAllocator heap_;
  Stream stream_;
  CudaCachingAllocator gpu_alloc_;
  std::vector<std::unique_ptr<DeviceBuffer<float>>> bufs_;
};

// Every element of got within tol·max|want| of want (and finite).
void ExpectClose(const Vec& got, const Vec& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double m = 1e-12;
  for (float v : want) m = std::max(m, std::fabs(static_cast<double>(v)));
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << what << "[" << i << "] = " << got[i];
    ASSERT_NEAR(got[i], want[i], tol * m) << what << "[" << i << "] of " << want.size();
  }
}

// ‖got − want‖₂ ≤ tol·‖want‖₂ (in double).
void ExpectRelL2(const Vec& got, const Vec& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
  }
  const double rel = std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
  EXPECT_LE(rel, tol) << what << ": relative L2 error over " << want.size() << " elements";
}

#define SKIP_WITHOUT_GPU() \
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason()

constexpr double kTol = 1e-4;
// The CUDA recurrence and the CPU's chunked form are the same math, rounded
// differently over T steps; the CUDA chunked form is the CPU's algorithm with
// its own chunk length (≤ 64) and summation orders. kScanTol (per element, relative
// to the largest reference value) is the old kernel's bound; the relative L2
// bounds are estimates for f32 (not yet measured on a GPU): ~1e-6 expected
// for y, a few 1e-6 for the gradients (ddt and dA go through a suffix sum over T).
constexpr double kScanTol = 2e-4;
constexpr double kScanFwdL2 = 1e-5;
constexpr double kScanBwdL2 = 1e-4;
// kChunkedMma keeps each f32 operand as two bf16 terms, |v − hi − lo| ≤ 2⁻¹⁸|v|,
// and drops lo·lo (≤ 2⁻¹⁸ of the product): ≤ 3·2⁻¹⁸ ≈ 1.1e-5 relative a product,
// and y goes through two products in a row (C·Bᵀ, then the masked matrix times
// x) with the f32 mask between them: ≤ ~2.5e-5 relative per term, which random
// signs average to well under that in L2. Its forward L2 bound is that worst
// case; the gradients keep kScanBwdL2 (an order above both).
constexpr double kMmaFwdL2 = 2.5e-5;
// kChunkedMmaBf16 rounds each product's operands to bf16 (2⁻⁹ relative):
// y, dx, dB, dC and ddt go through two products in a row, ≤ ~4·2⁻⁹ ≈ 7.8e-3
// a term (the warp emulator measured ≤ 5.5e-3 of the largest value), so
// 2e-2 per element and 1e-2 in L2; dA, a sum of B·T terms that cancel,
// within 2e-2 of Σ|term| (the double reference's; ssd_mma_emulation_test).
constexpr double kMmaBf16Tol = 2e-2;
constexpr double kMmaBf16L2 = 1e-2;

// ---------------------------------------------------------------- conv1d

struct ConvCase {
  int64_t B, T, Ch, K;
  bool silu;
};

class CausalConv1dGpuTest : public ::testing::TestWithParam<ConvCase> {};

TEST_P(CausalConv1dGpuTest, MatchesCpuDeterministicAndAccumulates) {
  SKIP_WITHOUT_GPU();
  const ConvCase c = GetParam();
  Env env;
  const Shape xs{c.B, c.T, c.Ch}, ws{c.Ch, c.K}, bs{c.Ch};
  Vec x = Random(Numel(xs), 1), w = Random(Numel(ws), 2, 0.5f), bias = Random(c.Ch, 3, 0.3f),
      dy = Random(Numel(xs), 4), dw0 = Random(Numel(ws), 5), db0 = Random(c.Ch, 6);
  // CPU.
  Vec y(Numel(xs)), dx(Numel(xs)), dw = dw0, db = db0;
  CausalConv1dForward(env.cpu, env.Host(x, xs), env.Host(w, ws), env.Host(bias, bs),
                      env.Host(y, xs), c.silu);
  CausalConv1dBackward(env.cpu, env.Host(dy, xs), env.Host(x, xs), env.Host(w, ws),
                       env.Host(bias, bs), c.silu, env.Host(dx, xs), env.Host(dw, ws),
                       env.Host(db, bs));
  // CUDA, twice.
  Tensor gx = env.Up(x, xs), gw = env.Up(w, ws), gb = env.Up(bias, bs), gdy = env.Up(dy, xs);
  Vec run[2][4];
  for (int r = 0; r < 2; ++r) {
    Tensor gy = env.Poisoned(xs), gdx = env.Poisoned(xs), gdw = env.Up(dw0, ws),
           gdb = env.Up(db0, bs);
    CausalConv1dForward(env.gpu, gx, gw, gb, gy, c.silu);
    CausalConv1dBackward(env.gpu, gdy, gx, gw, gb, c.silu, gdx, gdw, gdb);
    run[r][0] = env.Down(gy);
    run[r][1] = env.Down(gdx);
    run[r][2] = env.Down(gdw);
    run[r][3] = env.Down(gdb);
  }
  ExpectClose(run[0][0], y, kTol, "y");
  ExpectClose(run[0][1], dx, kTol, "dx");
  ExpectClose(run[0][2], dw, kTol, "dw");
  ExpectClose(run[0][3], db, kTol, "dbias");
  for (int k = 0; k < 4; ++k) EXPECT_TRUE(BitEqual(run[1][k], run[0][k])) << "output " << k;
  // dx in bf16 (in_proj_x's gradient input in bf16 training): the f32 dx
  // rounded to nearest even, bit for bit, as a cast would.
  Tensor gdxb = env.gpu.Empty(xs, DType::kBF16), gdw2 = env.Up(dw0, ws), gdb2 = env.Up(db0, bs);
  CausalConv1dBackward(env.gpu, gdy, gx, gw, gb, c.silu, gdxb, gdw2, gdb2);
  Tensor dxb32 = env.gpu.Empty(xs, DType::kF32);
  ops::Cast(env.gpu, gdxb, dxb32);
  const Vec dxbv = env.Down(dxb32);
  for (size_t i = 0; i < dxbv.size(); ++i) {
    const float want = ToF32(ToBF16(run[0][1][i]));
    ASSERT_EQ(std::memcmp(&dxbv[i], &want, sizeof(float)), 0) << "bf16 dx[" << i << "]";
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CausalConv1dGpuTest,
                         ::testing::Values(ConvCase{2, 37, 24, 4, true},
                                           ConvCase{3, 5, 7, 3, false},
                                           ConvCase{1, 2, 300, 4, true},
                                           // Ch a multiple of 64: the backward's stream
                                           // kernel (K = 1; K = 4 with the SiLU, 5 sequences
                                           // of 3 segments, 2 slabs, 2 channel blocks).
                                           ConvCase{4, 129, 64, 1, false},
                                           ConvCase{5, 70, 128, 4, true},
                                           // 4 sequences of 38 runs: 19 slabs of the
                                           // backward's 8 runs, some across sequences.
                                           ConvCase{4, 300, 40, 4, true},
                                           // K = 2, and T a multiple of the kernels' runs of 8.
                                           ConvCase{2, 64, 24, 2, true},
                                           // K = 5: the per-output kernels (runs take K ≤ 4).
                                           ConvCase{2, 33, 16, 5, false}));

// ---------------------------------------------------------------- softplus

TEST(SoftplusBiasGpuTest, MatchesCpuDeterministicAndAccumulates) {
  SKIP_WITHOUT_GPU();
  Env env;
  for (const auto& [N, H] :
       std::vector<std::pair<int64_t, int64_t>>{{333, 24}, {5, 3}, {1100, 96}}) {
    const Shape rs{N, H}, bs{H};
    // Scale 12: some u above the pass-through threshold 20.
    Vec raw = Random(N * H, 11, 12.0f), bias = Random(H, 12, 2.0f), ddt = Random(N * H, 13),
        db0 = Random(H, 14);
    Vec dt(N * H), draw(N * H), db = db0;
    SoftplusBiasForward(env.cpu, env.Host(raw, rs), env.Host(bias, bs), env.Host(dt, rs));
    SoftplusBiasBackward(env.cpu, env.Host(ddt, rs), env.Host(raw, rs), env.Host(bias, bs),
                         env.Host(draw, rs), env.Host(db, bs));
    Tensor graw = env.Up(raw, rs), gbias = env.Up(bias, bs), gddt = env.Up(ddt, rs);
    Vec run[2][3];
    for (int r = 0; r < 2; ++r) {
      Tensor gdt = env.Poisoned(rs), gdraw = env.Poisoned(rs), gdb = env.Up(db0, bs);
      SoftplusBiasForward(env.gpu, graw, gbias, gdt);
      SoftplusBiasBackward(env.gpu, gddt, graw, gbias, gdraw, gdb);
      run[r][0] = env.Down(gdt);
      run[r][1] = env.Down(gdraw);
      run[r][2] = env.Down(gdb);
    }
    ExpectClose(run[0][0], dt, kTol, "dt");
    ExpectClose(run[0][1], draw, kTol, "draw");
    ExpectClose(run[0][2], db, kTol, "dbias");
    for (int k = 0; k < 3; ++k) EXPECT_TRUE(BitEqual(run[1][k], run[0][k])) << "output " << k;
  }
}

// ---------------------------------------------------------------- A = −exp(A_log)

TEST(NegExpGpuTest, MatchesCpuDeterministicAndAccumulates) {
  SKIP_WITHOUT_GPU();
  Env env;
  for (int64_t H : {int64_t{1}, int64_t{24}, int64_t{300}}) {
    const Shape hs{H};
    Vec a_log = Random(H, 41, 1.5f), da = Random(H, 42), g0 = Random(H, 43);
    Vec A(H), g = g0;
    NegExpForward(env.cpu, env.Host(a_log, hs), env.Host(A, hs));
    NegExpBackwardAccumulate(env.cpu, env.Host(da, hs), env.Host(A, hs), env.Host(g, hs));
    Tensor ga_log = env.Up(a_log, hs), gda = env.Up(da, hs);
    Vec run[2][2];
    for (int r = 0; r < 2; ++r) {
      Tensor gA = env.Poisoned(hs), gg = env.Up(g0, hs);
      NegExpForward(env.gpu, ga_log, gA);
      NegExpBackwardAccumulate(env.gpu, gda, gA, gg);
      run[r][0] = env.Down(gA);
      run[r][1] = env.Down(gg);
    }
    ExpectClose(run[0][0], A, kTol, "A");
    ExpectClose(run[0][1], g, kTol, "A_log grad");
    for (int k = 0; k < 2; ++k) EXPECT_TRUE(BitEqual(run[1][k], run[0][k])) << "output " << k;
  }
}

// ---------------------------------------------------------------- gated RMSNorm

struct NormCase {
  int64_t N, Ch, group;
};

class GatedRmsNormGpuTest : public ::testing::TestWithParam<NormCase> {};

TEST_P(GatedRmsNormGpuTest, MatchesCpuDeterministicAndAccumulates) {
  SKIP_WITHOUT_GPU();
  const NormCase c = GetParam();
  Env env;
  const Shape xs{c.N, c.Ch}, ws{c.Ch}, rs{c.N, c.Ch / c.group};
  const float eps = 1e-5f;
  Vec x = Random(Numel(xs), 21), z = Random(Numel(xs), 22), w = Random(c.Ch, 23, 0.5f, 1.0f),
      dy = Random(Numel(xs), 24), dw0 = Random(c.Ch, 25);
  Vec y(Numel(xs)), rstd(Numel(rs)), dx(Numel(xs)), dz(Numel(xs)), dw = dw0;
  GatedRmsNormForward(env.cpu, env.Host(x, xs), env.Host(z, xs), env.Host(w, ws), env.Host(y, xs),
                      env.Host(rstd, rs), c.group, eps);
  GatedRmsNormBackward(env.cpu, env.Host(dy, xs), env.Host(x, xs), env.Host(z, xs), env.Host(w, ws),
                       env.Host(rstd, rs), c.group, env.Host(dx, xs), env.Host(dz, xs),
                       env.Host(dw, ws));
  Tensor gx = env.Up(x, xs), gz = env.Up(z, xs), gw = env.Up(w, ws), gdy = env.Up(dy, xs);
  Vec run[2][5];
  for (int r = 0; r < 2; ++r) {
    Tensor gy = env.Poisoned(xs), grstd = env.Poisoned(rs), gdx = env.Poisoned(xs),
           gdz = env.Poisoned(xs), gdw = env.Up(dw0, ws);
    GatedRmsNormForward(env.gpu, gx, gz, gw, gy, grstd, c.group, eps);
    GatedRmsNormBackward(env.gpu, gdy, gx, gz, gw, grstd, c.group, gdx, gdz, gdw);
    run[r][0] = env.Down(gy);
    run[r][1] = env.Down(grstd);
    run[r][2] = env.Down(gdx);
    run[r][3] = env.Down(gdz);
    run[r][4] = env.Down(gdw);
  }
  ExpectClose(run[0][0], y, kTol, "y");
  ExpectClose(run[0][1], rstd, kTol, "rstd");
  ExpectClose(run[0][2], dx, kTol, "dx");
  ExpectClose(run[0][3], dz, kTol, "dz");
  ExpectClose(run[0][4], dw, kTol, "dw");
  // y in bf16 (out_proj's input in bf16 training): the f32 y rounded to nearest
  // even, bit for bit, as a cast would.
  Tensor gyb = env.gpu.Empty(xs, DType::kBF16), grb = env.Poisoned(rs);
  GatedRmsNormForward(env.gpu, gx, gz, gw, gyb, grb, c.group, eps);
  Tensor yb32 = env.gpu.Empty(xs, DType::kF32);
  ops::Cast(env.gpu, gyb, yb32);
  const Vec ybv = env.Down(yb32);
  for (size_t i = 0; i < ybv.size(); ++i) {
    const float want = ToF32(ToBF16(run[0][0][i]));
    ASSERT_EQ(std::memcmp(&ybv[i], &want, sizeof(float)), 0) << "bf16 y[" << i << "]";
  }
  // dz in bf16 (in_proj_z's gradient input): likewise of the f32 dz.
  Tensor gdx2 = env.Poisoned(xs), gdzb = env.gpu.Empty(xs, DType::kBF16), gdw2 = env.Up(dw0, ws);
  GatedRmsNormBackward(env.gpu, gdy, gx, gz, gw, grb, c.group, gdx2, gdzb, gdw2);
  Tensor dzb32 = env.gpu.Empty(xs, DType::kF32);
  ops::Cast(env.gpu, gdzb, dzb32);
  const Vec dzbv = env.Down(dzb32);
  for (size_t i = 0; i < dzbv.size(); ++i) {
    const float want = ToF32(ToBF16(run[0][3][i]));
    ASSERT_EQ(std::memcmp(&dzbv[i], &want, sizeof(float)), 0) << "bf16 dz[" << i << "]";
  }
  // dy in bf16 (out_proj's input gradient in bf16 training, read as it
  // comes): the bits of the f32 path given dy's f32 cast.
  Tensor gdyb = env.gpu.Empty(xs, DType::kBF16), gdyr = env.gpu.Empty(xs, DType::kF32);
  ops::Cast(env.gpu, gdy, gdyb);
  ops::Cast(env.gpu, gdyb, gdyr);
  Tensor gdx3 = env.Poisoned(xs), gdz3 = env.Poisoned(xs), gdw3 = env.Up(dw0, ws);
  Tensor gdx4 = env.Poisoned(xs), gdz4 = env.Poisoned(xs), gdw4 = env.Up(dw0, ws);
  GatedRmsNormBackward(env.gpu, gdyr, gx, gz, gw, grb, c.group, gdx3, gdz3, gdw3);
  GatedRmsNormBackward(env.gpu, gdyb, gx, gz, gw, grb, c.group, gdx4, gdz4, gdw4);
  EXPECT_TRUE(BitEqual(env.Down(gdx4), env.Down(gdx3))) << "dx from a bf16 dy";
  EXPECT_TRUE(BitEqual(env.Down(gdz4), env.Down(gdz3))) << "dz from a bf16 dy";
  EXPECT_TRUE(BitEqual(env.Down(gdw4), env.Down(gdw3))) << "dw from a bf16 dy";
  for (int k = 0; k < 5; ++k) EXPECT_TRUE(BitEqual(run[1][k], run[0][k])) << "output " << k;
}

INSTANTIATE_TEST_SUITE_P(Shapes, GatedRmsNormGpuTest,
                         ::testing::Values(NormCase{37, 96, 32}, NormCase{37, 96, 48},
                                           NormCase{5, 96, 96}, NormCase{64, 256, 256},
                                           NormCase{3, 12, 4},
                                           NormCase{600, 64, 32},  // 3 column slabs
                                           // the block-per-item kernels (group >= 256), at
                                           // the hybrid's group of 1536 and past a multiple
                                           // of 256
                                           NormCase{16, 3072, 1536}, NormCase{7, 600, 300},
                                           // the boundaries between them: 255 and 2049 run
                                           // the warp kernels, 256 and 2048 the block ones
                                           NormCase{4, 510, 255}, NormCase{3, 4096, 2048},
                                           NormCase{2, 4098, 2049},
                                           // the row backward's dw over slabs of 4 rows,
                                           // the last one short, 2 groups a row
                                           NormCase{13, 512, 256},
                                           // the forward by slabs of rows (from 4096
                                           // rows): slabs of 5, the last one of 4
                                           NormCase{4099, 512, 256}));

// ---------------------------------------------------------------- SSD scan

struct ScanCase {
  int64_t B, T, H, P, G, N, chunk;
};

class SsdScanGpuTest : public ::testing::TestWithParam<ScanCase> {};

// Whether kChunkedHeads' gradients are kChunked's bit for bit (y always is):
// dB and dC summed in head order in one block, i.e. one split of a group's
// heads, or one head a block (ssd_chunked_backward.cu HeadSplits: the fewest
// splits S, a divisor of H/G, with B·⌈T/L⌉·G·S ≥ 128). Both cut T into
// chunks of the same L where kChunkedHeads fits.
bool HeadsBitwise(const ScanCase& c) {
  const int64_t L = SsdCudaChunkLength(SsdCudaKernel::kChunkedHeads, true, c.P, c.N, c.chunk);
  EXPECT_EQ(L, SsdCudaChunkLength(SsdCudaKernel::kChunked, true, c.P, c.N, c.chunk));
  const int64_t hpg = c.H / c.G, blocks = c.B * ((c.T + L - 1) / L) * c.G;
  for (int64_t s = 1; s < hpg; ++s) {
    if (hpg % s == 0 && blocks * s >= 128) return s == 1;
  }
  return true;  // a head a block
}

TEST_P(SsdScanGpuTest, MatchesCpuDeterministicAndAccumulates) {
  SKIP_WITHOUT_GPU();
  const ScanCase c = GetParam();
  Env env;
  const Shape xs{c.B, c.T, c.H, c.P}, ts{c.B, c.T, c.H}, hs{c.H}, bs{c.B, c.T, c.G, c.N};
  Vec x = Random(Numel(xs), 31), Bm = Random(Numel(bs), 32), Cm = Random(Numel(bs), 33),
      D = Random(c.H, 34), dy = Random(Numel(xs), 35), dA0 = Random(c.H, 36), dD0 = Random(c.H, 37);
  Vec dt = Random(Numel(ts), 38, 0.2f), A = Random(c.H, 39, 0.5f);
  for (float& v : dt) v = 0.05f + std::fabs(v);  // positive step sizes
  for (float& v : A) v = -std::exp(v);           // negative decay rates
  // CPU.
  Vec y(Numel(xs)), dx(Numel(xs)), ddt(Numel(ts)), dBm(Numel(bs)), dCm(Numel(bs)), dA = dA0,
                                                                                   dD = dD0;
  SsdScanForward(env.cpu, env.Host(x, xs), env.Host(dt, ts), env.Host(A, hs), env.Host(Bm, bs),
                 env.Host(Cm, bs), env.Host(D, hs), env.Host(y, xs), c.chunk);
  SsdScanBackward(env.cpu, env.Host(dy, xs), env.Host(x, xs), env.Host(dt, ts), env.Host(A, hs),
                  env.Host(Bm, bs), env.Host(Cm, bs), env.Host(D, hs), env.Host(dx, xs),
                  env.Host(ddt, ts), env.Host(dA, hs), env.Host(dBm, bs), env.Host(dCm, bs),
                  env.Host(dD, hs), c.chunk);
  // CUDA, twice, with each kernel: the chunked forms, the recurrence, and kAuto
  // (kChunkedMma where P and N ≤ 64, else the recurrence forward and, where
  // P·N ≤ 256 and it fits, the chunked backward).
  Tensor gx = env.Up(x, xs), gdt = env.Up(dt, ts), gA = env.Up(A, hs), gB = env.Up(Bm, bs),
         gC = env.Up(Cm, bs), gD = env.Up(D, hs), gdy = env.Up(dy, xs);
  Vec chunked[7];  // kChunked's outputs, for kChunkedHeads
  for (SsdCudaKernel kernel :
       {SsdCudaKernel::kChunked, SsdCudaKernel::kChunkedHeads, SsdCudaKernel::kChunkedMma,
        SsdCudaKernel::kChunkedMmaBf16, SsdCudaKernel::kRecurrence, SsdCudaKernel::kAuto}) {
    // The chunked kernels refuse shapes whose chunk block does not fit
    // (KernelEdges' last case for both; kChunkedHeads, whose backward block is
    // larger, also N = 256, N = 128 and P = 64 here); every other case fits.
    if (!SsdCudaKernelFits(kernel, /*backward=*/true, c.P, c.N, c.chunk)) {
      EXPECT_NE(kernel, SsdCudaKernel::kRecurrence);
      EXPECT_NE(kernel, SsdCudaKernel::kAuto);
      continue;
    }
    SCOPED_TRACE(kernel == SsdCudaKernel::kChunked          ? "kChunked"
                 : kernel == SsdCudaKernel::kChunkedHeads   ? "kChunkedHeads"
                 : kernel == SsdCudaKernel::kChunkedMma     ? "kChunkedMma"
                 : kernel == SsdCudaKernel::kChunkedMmaBf16 ? "kChunkedMmaBf16"
                 : kernel == SsdCudaKernel::kRecurrence     ? "kRecurrence"
                                                            : "kAuto");
    Vec run[2][7];
    for (int r = 0; r < 2; ++r) {
      Tensor gy = env.Poisoned(xs), gdx = env.Poisoned(xs), gddt = env.Poisoned(ts),
             gdB = env.Poisoned(bs), gdC = env.Poisoned(bs), gdA = env.Up(dA0, hs),
             gdD = env.Up(dD0, hs);
      SsdScanForward(env.gpu, gx, gdt, gA, gB, gC, gD, gy, c.chunk, kernel);
      SsdScanBackward(env.gpu, gdy, gx, gdt, gA, gB, gC, gD, gdx, gddt, gdA, gdB, gdC, gdD, c.chunk,
                      kernel);
      run[r][0] = env.Down(gy);
      run[r][1] = env.Down(gdx);
      run[r][2] = env.Down(gddt);
      run[r][3] = env.Down(gdB);
      run[r][4] = env.Down(gdC);
      run[r][5] = env.Down(gdA);
      run[r][6] = env.Down(gdD);
    }
    if (kernel == SsdCudaKernel::kChunkedMmaBf16) {  // bf16 products: bf16's bounds
      const Vec* want[7] = {&y, &dx, &ddt, &dBm, &dCm, &dA, &dD};
      const char* names[7] = {"y", "dx", "ddt", "dBm", "dCm", "dA", "dD"};
      for (int k = 0; k < 7; ++k) {
        if (k == 5) continue;
        ExpectClose(run[0][k], *want[k], kMmaBf16Tol, names[k]);
        ExpectRelL2(run[0][k], *want[k], kMmaBf16L2, names[k]);
      }
      const reference::SsdReference ref =
          reference::RunSsdReference({c.B, c.T, c.H, c.P, c.G, c.N}, x, dt, A, Bm, Cm, D, dy);
      for (int64_t h = 0; h < c.H; ++h) {
        ASSERT_TRUE(std::isfinite(run[0][5][h])) << "dA[" << h << "]";
        EXPECT_NEAR(run[0][5][h], dA[h], kMmaBf16Tol * std::fmax(ref.dA_terms[h], 1.0))
            << "dA[" << h << "]";
      }
      for (int k = 0; k < 7; ++k) EXPECT_TRUE(BitEqual(run[1][k], run[0][k])) << "output " << k;
      continue;
    }
    ExpectClose(run[0][0], y, kScanTol, "y");
    ExpectClose(run[0][1], dx, kScanTol, "dx");
    ExpectClose(run[0][2], ddt, kScanTol, "ddt");
    ExpectClose(run[0][3], dBm, kScanTol, "dBm");
    ExpectClose(run[0][4], dCm, kScanTol, "dCm");
    ExpectClose(run[0][5], dA, kScanTol, "dA");
    ExpectClose(run[0][6], dD, kScanTol, "dD");
    ExpectRelL2(run[0][0], y, kernel == SsdCudaKernel::kChunkedMma ? kMmaFwdL2 : kScanFwdL2, "y");
    ExpectRelL2(run[0][1], dx, kScanBwdL2, "dx");
    ExpectRelL2(run[0][2], ddt, kScanBwdL2, "ddt");
    ExpectRelL2(run[0][3], dBm, kScanBwdL2, "dBm");
    ExpectRelL2(run[0][4], dCm, kScanBwdL2, "dCm");
    ExpectRelL2(run[0][5], dA, kScanBwdL2, "dA");
    ExpectRelL2(run[0][6], dD, kScanBwdL2, "dD");
    for (int k = 0; k < 7; ++k) EXPECT_TRUE(BitEqual(run[1][k], run[0][k])) << "output " << k;
    if (kernel == SsdCudaKernel::kChunked) {
      for (int k = 0; k < 7; ++k) chunked[k] = run[0][k];
    } else if (kernel == SsdCudaKernel::kChunkedHeads && !chunked[0].empty()) {
      // The same products of each head in the same order: y always (the
      // forward's chunk length is kChunked's), the gradients where dB and dC
      // are summed over the heads in SumGroupHeadsKernel's order too.
      const int outputs = HeadsBitwise(c) ? 7 : 1;
      for (int k = 0; k < outputs; ++k) {
        EXPECT_TRUE(BitEqual(run[0][k], chunked[k])) << "output " << k << " vs kChunked";
      }
    }
  }
}

// T not a multiple of the chunk, G < H and G == H, several B, chunk ≥ T, chunk 1.
INSTANTIATE_TEST_SUITE_P(
    Shapes, SsdScanGpuTest,
    ::testing::Values(ScanCase{2, 37, 4, 8, 2, 16, 16}, ScanCase{3, 20, 2, 5, 1, 7, 8},
                      ScanCase{1, 50, 6, 32, 3, 64, 128}, ScanCase{2, 19, 2, 4, 2, 8, 1},
                      ScanCase{2, 70, 4, 16, 1, 128, 32}, ScanCase{1, 9, 2, 3, 2, 256, 4}));

// The edges of the CUDA kernels' cuts (ssd_scan.cu MakeScanPlan: lanes per row and
// states per lane by N, rows per block, p-tiles, ts-step shared tiles):
INSTANTIATE_TEST_SUITE_P(
    KernelEdges, SsdScanGpuTest,
    ::testing::Values(
        ScanCase{2, 300, 4, 16, 2, 16, 128},   // T % chunk ≠ 0, T % 32 ≠ 0, G < H
        ScanCase{2, 100, 3, 8, 1, 16, 128},    // T < chunk
        ScanCase{3, 1, 4, 16, 2, 16, 128},     // T = 1
        ScanCase{1, 1024, 2, 16, 1, 16, 128},  // the training T: the long suffix sums
        ScanCase{1, 150, 2, 64, 1, 128, 64},   // P = 64, N = 128: 2 p-tiles, 8-step tiles
        ScanCase{2, 45, 4, 64, 4, 64, 128},    // P = 64, N = 64, H = G but 2 p-tiles
        ScanCase{2, 33, 3, 1, 3, 16, 16},      // P = 1 (one of two rows idle), H = G in place
        ScanCase{1, 40, 96, 16, 1, 16, 128},   // large H, the training heads
        ScanCase{1, 64, 2, 100, 1, 16, 32},    // P = 100: 4 p-tiles, the last one 4 rows
        ScanCase{2, 50, 2, 4, 1, 3, 16},       // N = 3: 4 lanes a row, 1 padding state
        ScanCase{1, 70, 2, 16, 2, 32, 16},     // N = 32: 2 states a lane
        ScanCase{1, 50, 2, 8, 1, 100, 16},     // N = 100: 8 states a lane, 28 padding
        ScanCase{1, 200, 2, 64, 1, 128, 128},  // chunked: L = 16 (32 does not fit P·N = 8192)
        ScanCase{1, 5, 1, 400, 1, 256,
                 4}));  // chunked fits no L: kChunked skipped, kAuto the recurrence

// kChunkedHeads with several heads a block (the cases above have so few chunks
// that each block gets one head). The backward (splits for ≥ 128 blocks): one
// split of a group, so kChunked's bits (G = 1, G < H, G = H, T % 64 ≠ 0, odd
// P and N, L = 16); several splits of several heads each (dB, dC in another
// order: within the tolerances only). The forward (splits for ≥ 384 blocks):
// 2 heads a block in the first, fifth and last cases.
INSTANTIATE_TEST_SUITE_P(
    HeadGroups, SsdScanGpuTest,
    ::testing::Values(ScanCase{2, 4096, 8, 16, 1, 16, 128},   // 128 blocks, 8 heads each
                      ScanCase{3, 4000, 4, 16, 2, 16, 128},   // the last chunk 32 steps
                      ScanCase{2, 4096, 4, 16, 4, 16, 128},   // G = H: a head a block
                      ScanCase{3, 2700, 2, 5, 1, 7, 64},      // P = 5, N = 7
                      ScanCase{4, 1000, 4, 5, 2, 7, 16},      // L = 16
                      ScanCase{1, 1024, 32, 16, 1, 16, 128},  // 8 splits of 4 heads
                      ScanCase{1, 4096, 12, 5, 1, 7, 64}));   // 2 splits of 6 heads

// The same paths at small sizes, for compute-sanitizer's racecheck, synccheck
// and memcheck (tools/bench/kernels_check.sh): 8 heads a backward block and 2
// a forward block, in one chunk and with a 36-step last chunk; 4 splits of 2.
INSTANTIATE_TEST_SUITE_P(HeadGroupsSmall, SsdScanGpuTest,
                         ::testing::Values(ScanCase{128, 16, 8, 16, 1, 16, 16},
                                           ScanCase{64, 100, 8, 16, 1, 16, 64},
                                           ScanCase{16, 128, 8, 5, 1, 7, 64}));

}  // namespace
}  // namespace gtp::kernels::ssm
