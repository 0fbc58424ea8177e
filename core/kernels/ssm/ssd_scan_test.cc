// Tests of the chunked SSD scan (ssd_scan.h) against the sequential
// recurrence written out literally in double:
//   S_t = exp(dt_t·A_h)·S_{t−1} + dt_t·x_t ⊗ B_t,  y_t = S_t·C_t + D_h·x_t,
// its reverse mode (also in double, here), and central finite differences of
// that reference on a few elements of every input. The loss is L = Σ y∘R
// for a random R, so the backward gets dy = R.
#include "core/kernels/ssm/ssd_scan.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/allocator.h"
#include "core/kernels/testing/harness.h"
#include "core/tensor.h"
#include "gtest/gtest.h"

namespace gtp::kernels::ssm {
namespace {

using testing::NaNs;
using testing::Rng;
using testing::ToDouble;

struct Case {
  int64_t B, T, H, P, G, N, chunk;
};

std::string Name(const Case& c) {
  return absl::StrCat("B", c.B, "_T", c.T, "_H", c.H, "_P", c.P, "_G", c.G, "_N", c.N, "_L",
                      c.chunk);
}

size_t Numel(const Case& c, int64_t last, int64_t heads) {
  return static_cast<size_t>(c.B * c.T * heads * last);
}

// Inputs of one case; double for the reference.
template <typename F>
struct Inputs {
  std::vector<F> x, dt, A, Bm, Cm, D;
};

Inputs<float> MakeInputs(const Case& c, uint64_t seed) {
  Rng rng(seed);
  Inputs<float> in;
  in.x = rng.Normal(Numel(c, c.P, c.H));
  in.dt = rng.Uniform(Numel(c, 1, c.H), 0.02f, 0.5f);  // positive, as after softplus
  in.A = rng.Uniform(c.H, -1.5f, -0.1f);
  in.Bm = rng.Normal(Numel(c, c.N, c.G), 0.0f, 0.5f);
  in.Cm = rng.Normal(Numel(c, c.N, c.G), 0.0f, 0.5f);
  in.D = rng.Normal(c.H);
  return in;
}

Inputs<double> ToDouble(const Inputs<float>& in) {
  return {testing::ToDouble(in.x),  testing::ToDouble(in.dt), testing::ToDouble(in.A),
          testing::ToDouble(in.Bm), testing::ToDouble(in.Cm), testing::ToDouble(in.D)};
}

// Index helpers of the [B, T, H, P], [B, T, H] and [B, T, G, N] layouts.
struct Ix {
  const Case& c;
  size_t X(int64_t b, int64_t t, int64_t h, int64_t p) const {
    return static_cast<size_t>(((b * c.T + t) * c.H + h) * c.P + p);
  }
  size_t Dt(int64_t b, int64_t t, int64_t h) const {
    return static_cast<size_t>((b * c.T + t) * c.H + h);
  }
  size_t Bc(int64_t b, int64_t t, int64_t g, int64_t n) const {
    return static_cast<size_t>(((b * c.T + t) * c.G + g) * c.N + n);
  }
};

// The sequential recurrence, step by step. states (optional) gets S_t for
// every (b, h, t): [B, H, T, P, N].
std::vector<double> RefForward(const Case& c, const Inputs<double>& in,
                               std::vector<double>* states = nullptr) {
  const Ix ix{c};
  std::vector<double> y(Numel(c, c.P, c.H));
  if (states) states->assign(static_cast<size_t>(c.B * c.H * c.T * c.P * c.N), 0.0);
  std::vector<double> S(c.P * c.N);
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.H; ++h) {
      const int64_t g = h / (c.H / c.G);
      std::fill(S.begin(), S.end(), 0.0);
      for (int64_t t = 0; t < c.T; ++t) {
        const double dt = in.dt[ix.Dt(b, t, h)], decay = std::exp(dt * in.A[h]);
        for (int64_t p = 0; p < c.P; ++p)
          for (int64_t n = 0; n < c.N; ++n)
            S[p * c.N + n] =
                decay * S[p * c.N + n] + dt * in.x[ix.X(b, t, h, p)] * in.Bm[ix.Bc(b, t, g, n)];
        for (int64_t p = 0; p < c.P; ++p) {
          double s = in.D[h] * in.x[ix.X(b, t, h, p)];
          for (int64_t n = 0; n < c.N; ++n) s += S[p * c.N + n] * in.Cm[ix.Bc(b, t, g, n)];
          y[ix.X(b, t, h, p)] = s;
        }
        if (states)
          std::copy(S.begin(), S.end(), states->begin() + ((b * c.H + h) * c.T + t) * c.P * c.N);
      }
    }
  return y;
}

// Reverse mode of RefForward for dy = R: walks t backwards carrying
// dS = ∂L/∂S_t.
Inputs<double> RefBackward(const Case& c, const Inputs<double>& in, const std::vector<double>& dy) {
  const Ix ix{c};
  std::vector<double> states;
  RefForward(c, in, &states);
  Inputs<double> g{std::vector<double>(in.x.size()),  std::vector<double>(in.dt.size()),
                   std::vector<double>(in.A.size()),  std::vector<double>(in.Bm.size()),
                   std::vector<double>(in.Cm.size()), std::vector<double>(in.D.size())};
  std::vector<double> dS(c.P * c.N);
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.H; ++h) {
      const int64_t gr = h / (c.H / c.G);
      std::fill(dS.begin(), dS.end(), 0.0);
      for (int64_t t = c.T - 1; t >= 0; --t) {
        const double* S = &states[((b * c.H + h) * c.T + t) * c.P * c.N];
        const double* S_prev = t > 0 ? S - c.P * c.N : nullptr;
        // y_t = S_t·C_t + D·x_t.
        for (int64_t p = 0; p < c.P; ++p) {
          const double dyp = dy[ix.X(b, t, h, p)];
          g.D[h] += dyp * in.x[ix.X(b, t, h, p)];
          g.x[ix.X(b, t, h, p)] += in.D[h] * dyp;
          for (int64_t n = 0; n < c.N; ++n) {
            dS[p * c.N + n] += dyp * in.Cm[ix.Bc(b, t, gr, n)];
            g.Cm[ix.Bc(b, t, gr, n)] += S[p * c.N + n] * dyp;
          }
        }
        // S_t = α·S_{t−1} + dt·x_t ⊗ B_t, α = exp(dt·A).
        const double dt = in.dt[ix.Dt(b, t, h)], alpha = std::exp(dt * in.A[h]);
        double dalpha = 0.0, ddt = 0.0;
        for (int64_t p = 0; p < c.P; ++p)
          for (int64_t n = 0; n < c.N; ++n) {
            const double ds = dS[p * c.N + n];
            const double xp = in.x[ix.X(b, t, h, p)], bn = in.Bm[ix.Bc(b, t, gr, n)];
            if (S_prev) dalpha += ds * S_prev[p * c.N + n];
            ddt += ds * xp * bn;
            g.x[ix.X(b, t, h, p)] += dt * ds * bn;
            g.Bm[ix.Bc(b, t, gr, n)] += dt * ds * xp;
          }
        g.dt[ix.Dt(b, t, h)] = ddt + dalpha * alpha * in.A[h];
        g.A[h] += dalpha * alpha * dt;
        for (double& ds : dS) ds *= alpha;
      }
    }
  return g;
}

double Loss(const Case& c, const Inputs<double>& in, const std::vector<double>& R) {
  const std::vector<double> y = RefForward(c, in);
  double s = 0.0;
  for (size_t i = 0; i < y.size(); ++i) s += y[i] * R[i];
  return s;
}

// Passes when every element of out is finite and max|out − ref| ≤ tol·max|ref|.
::testing::AssertionResult MaxClose(const std::vector<float>& out, const std::vector<double>& ref,
                                    double tol) {
  if (out.size() != ref.size())
    return ::testing::AssertionFailure() << "size " << out.size() << " vs " << ref.size();
  double scale = 0.0, worst = 0.0;
  size_t at = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i]))
      return ::testing::AssertionFailure() << "non-finite out[" << i << "] = " << out[i];
    scale = std::max(scale, std::abs(ref[i]));
    const double err = std::abs(out[i] - ref[i]);
    if (err > worst) worst = err, at = i;
  }
  if (worst <= tol * std::max(scale, 1e-30)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "max error " << worst << " (" << worst / scale << " of max |ref| " << scale << ") at "
         << at << ": " << out[at] << " vs " << ref[at];
}

Tensor Wrap(std::vector<float>& v, const Shape& s) {
  return Tensor::Wrap(v.data(), s, DType::kF32, Device::Cpu());
}

// Output buffers of the backward.
struct Grads {
  std::vector<float> dx, ddt, dA, dBm, dCm, dD;
};

class SsdScanTest : public ::testing::TestWithParam<Case> {
 protected:
  void Forward(const Case& c, Inputs<float>& in, std::vector<float>& y) {
    SsdScanForward(e_, Wrap(in.x, {c.B, c.T, c.H, c.P}), Wrap(in.dt, {c.B, c.T, c.H}),
                   Wrap(in.A, {c.H}), Wrap(in.Bm, {c.B, c.T, c.G, c.N}),
                   Wrap(in.Cm, {c.B, c.T, c.G, c.N}), Wrap(in.D, {c.H}),
                   Wrap(y, {c.B, c.T, c.H, c.P}), c.chunk);
  }
  // Fresh NaN-filled activation gradients (proving they are written) and zero
  // parameter gradients.
  Grads NewGrads(const Case& c) {
    return {NaNs(Numel(c, c.P, c.H)), NaNs(Numel(c, 1, c.H)),   std::vector<float>(c.H, 0.0f),
            NaNs(Numel(c, c.N, c.G)), NaNs(Numel(c, c.N, c.G)), std::vector<float>(c.H, 0.0f)};
  }
  void Backward(const Case& c, std::vector<float>& dy, Inputs<float>& in, Grads& g) {
    const Shape xs{c.B, c.T, c.H, c.P}, dts{c.B, c.T, c.H}, bs{c.B, c.T, c.G, c.N}, hs{c.H};
    SsdScanBackward(e_, Wrap(dy, xs), Wrap(in.x, xs), Wrap(in.dt, dts), Wrap(in.A, hs),
                    Wrap(in.Bm, bs), Wrap(in.Cm, bs), Wrap(in.D, hs), Wrap(g.dx, xs),
                    Wrap(g.ddt, dts), Wrap(g.dA, hs), Wrap(g.dBm, bs), Wrap(g.dCm, bs),
                    Wrap(g.dD, hs), c.chunk);
  }

  HeapAllocator host_;
  Exec e_ = Exec::Cpu(host_);
};

constexpr double kTol = 1e-4;  // f32 kernel vs double reference, relative to max |ref|

TEST_P(SsdScanTest, ForwardMatchesSequentialRecurrence) {
  const Case c = GetParam();
  Inputs<float> in = MakeInputs(c, 1);
  std::vector<float> y = NaNs(Numel(c, c.P, c.H));
  Forward(c, in, y);
  EXPECT_TRUE(MaxClose(y, RefForward(c, ToDouble(in)), kTol));
}

TEST_P(SsdScanTest, BackwardMatchesReverseModeOfTheRecurrence) {
  const Case c = GetParam();
  Inputs<float> in = MakeInputs(c, 2);
  std::vector<float> R = Rng(3).Normal(Numel(c, c.P, c.H));
  Grads g = NewGrads(c);
  Backward(c, R, in, g);
  const Inputs<double> ref = RefBackward(c, ToDouble(in), ToDouble(R));
  EXPECT_TRUE(MaxClose(g.dx, ref.x, kTol)) << "dx";
  EXPECT_TRUE(MaxClose(g.ddt, ref.dt, kTol)) << "ddt";
  EXPECT_TRUE(MaxClose(g.dA, ref.A, kTol)) << "dA";
  EXPECT_TRUE(MaxClose(g.dBm, ref.Bm, kTol)) << "dBm";
  EXPECT_TRUE(MaxClose(g.dCm, ref.Cm, kTol)) << "dCm";
  EXPECT_TRUE(MaxClose(g.dD, ref.D, kTol)) << "dD";
}

// The reference's reverse mode against central differences of its forward,
// on a few elements of every input (first, last and some between).
TEST_P(SsdScanTest, ReferenceGradientsMatchFiniteDifferences) {
  const Case c = GetParam();
  const Inputs<double> in = ToDouble(MakeInputs(c, 2));
  const std::vector<double> R = ToDouble(Rng(3).Normal(Numel(c, c.P, c.H)));
  const Inputs<double> ref = RefBackward(c, in, R);
  auto check = [&](std::vector<double> Inputs<double>::*field, const char* name) {
    const std::vector<double>& grad = ref.*field;
    double scale = 0.0;
    for (double v : grad) scale = std::max(scale, std::abs(v));
    const size_t n = grad.size();
    for (size_t i : {size_t{0}, n / 3, n / 2, (2 * n) / 3, n - 1}) {
      Inputs<double> plus = in, minus = in;
      const double h = 1e-5 * std::max(1.0, std::abs((in.*field)[i]));
      (plus.*field)[i] += h;
      (minus.*field)[i] -= h;
      const double fd = (Loss(c, plus, R) - Loss(c, minus, R)) / (2 * h);
      EXPECT_NEAR(grad[i], fd, 1e-6 * std::max(scale, 1.0)) << name << "[" << i << "]";
    }
  };
  check(&Inputs<double>::x, "dx");
  check(&Inputs<double>::dt, "ddt");
  check(&Inputs<double>::A, "dA");
  check(&Inputs<double>::Bm, "dBm");
  check(&Inputs<double>::Cm, "dCm");
  check(&Inputs<double>::D, "dD");
}

TEST_P(SsdScanTest, DeterministicAndParameterGradientsAccumulate) {
  const Case c = GetParam();
  Inputs<float> in = MakeInputs(c, 4);
  std::vector<float> R = Rng(5).Normal(Numel(c, c.P, c.H));
  std::vector<float> y1 = NaNs(R.size()), y2 = NaNs(R.size());
  Forward(c, in, y1);
  Forward(c, in, y2);
  EXPECT_EQ(0, std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float)));
  Grads once = NewGrads(c), twice = NewGrads(c);
  Backward(c, R, in, once);
  Backward(c, R, in, twice);
  Backward(c, R, in, twice);  // dA, dD: 0 + g + g = 2g exactly
  auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  };
  EXPECT_TRUE(same(once.dx, twice.dx));
  EXPECT_TRUE(same(once.ddt, twice.ddt));
  EXPECT_TRUE(same(once.dBm, twice.dBm));
  EXPECT_TRUE(same(once.dCm, twice.dCm));
  for (int64_t h = 0; h < c.H; ++h) {
    EXPECT_EQ(twice.dA[h], 2.0f * once.dA[h]) << h;
    EXPECT_EQ(twice.dD[h], 2.0f * once.dD[h]) << h;
  }
  // A nonzero start is added to.
  const Inputs<double> ref = RefBackward(c, ToDouble(in), ToDouble(R));
  Grads g = NewGrads(c);
  std::fill(g.dA.begin(), g.dA.end(), 1.0f);
  std::fill(g.dD.begin(), g.dD.end(), -2.0f);
  Backward(c, R, in, g);
  std::vector<double> dA_ref = ref.A, dD_ref = ref.D;
  for (double& v : dA_ref) v += 1.0;
  for (double& v : dD_ref) v -= 2.0;
  EXPECT_TRUE(MaxClose(g.dA, dA_ref, kTol));
  EXPECT_TRUE(MaxClose(g.dD, dD_ref, kTol));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SsdScanTest,
    ::testing::Values(Case{2, 1, 4, 8, 1, 16, 16},     // one step
                      Case{2, 5, 4, 8, 2, 16, 16},     // T < chunk
                      Case{2, 16, 4, 8, 4, 16, 16},    // T = chunk
                      Case{2, 37, 4, 8, 1, 16, 16},    // ragged last chunk
                      Case{2, 64, 4, 8, 2, 16, 16},    // several full chunks
                      Case{2, 100, 4, 8, 4, 16, 16},   // ragged, G = H
                      Case{2, 300, 4, 8, 2, 16, 128},  // the default chunk, ragged
                      Case{2, 37, 4, 16, 2, 8, 16},    // P > N
                      Case{2, 23, 4, 8, 4, 16, 1},     // chunk 1: the recurrence itself
                      Case{2, 23, 4, 8, 2, 16, 7}),    // odd chunk
    [](const ::testing::TestParamInfo<Case>& info) { return Name(info.param); });

TEST(SsdScan, ResultDoesNotDependOnTheChunk) {
  const Case c{2, 300, 4, 8, 2, 16, 128};
  Inputs<float> in = MakeInputs(c, 6);
  HeapAllocator host;
  const Exec e = Exec::Cpu(host);
  const Shape xs{c.B, c.T, c.H, c.P}, bs{c.B, c.T, c.G, c.N};
  std::vector<float> ref(Numel(c, c.P, c.H));
  SsdScanForward(e, Wrap(in.x, xs), Wrap(in.dt, {c.B, c.T, c.H}), Wrap(in.A, {c.H}),
                 Wrap(in.Bm, bs), Wrap(in.Cm, bs), Wrap(in.D, {c.H}), Wrap(ref, xs));
  const std::vector<double> ref_d = ToDouble(ref);
  for (int64_t chunk : {1, 3, 64, 300, 1000}) {
    std::vector<float> y = NaNs(ref.size());
    SsdScanForward(e, Wrap(in.x, xs), Wrap(in.dt, {c.B, c.T, c.H}), Wrap(in.A, {c.H}),
                   Wrap(in.Bm, bs), Wrap(in.Cm, bs), Wrap(in.D, {c.H}), Wrap(y, xs), chunk);
    EXPECT_TRUE(MaxClose(y, ref_d, 1e-5)) << "chunk " << chunk;
  }
}

TEST(SsdScanDeathTest, BadShapesAbortWithAMessage) {
  const Case c{2, 5, 4, 8, 2, 16, 16};
  Inputs<float> in = MakeInputs(c, 7);
  HeapAllocator host;
  const Exec e = Exec::Cpu(host);
  const Shape xs{c.B, c.T, c.H, c.P}, dts{c.B, c.T, c.H}, bs{c.B, c.T, c.G, c.N}, hs{c.H};
  std::vector<float> y(Numel(c, c.P, c.H)), big(4096);
  auto fwd = [&](const Tensor& x, const Tensor& dt, const Tensor& A, const Tensor& Bm,
                 const Tensor& Cm, const Tensor& D, const Tensor& out,
                 int64_t chunk = 16) { SsdScanForward(e, x, dt, A, Bm, Cm, D, out, chunk); };
  const Tensor x = Wrap(in.x, xs), dt = Wrap(in.dt, dts), A = Wrap(in.A, hs), Bm = Wrap(in.Bm, bs),
               Cm = Wrap(in.Cm, bs), D = Wrap(in.D, hs), out = Wrap(y, xs);
  EXPECT_DEATH(fwd(x.View({c.B * c.T, c.H, c.P}), dt, A, Bm, Cm, D, out),
               "x must be \\[B, T, H, P\\]");
  EXPECT_DEATH(fwd(x, dt, A, Wrap(big, {c.B, c.T, 3, c.N}), Wrap(big, {c.B, c.T, 3, c.N}), D, out),
               "H = 4 must be a multiple of groups G = 3");
  EXPECT_DEATH(fwd(x, dt, A, Bm, Wrap(big, {c.B, c.T, c.G, c.N + 1}), D, out),
               "Cm must be shaped like Bm");
  EXPECT_DEATH(fwd(x, Wrap(big, {c.B, c.T, c.H + 1}), A, Bm, Cm, D, out),
               "dt must be \\[B, T, H\\]");
  EXPECT_DEATH(fwd(x, dt, Wrap(big, {c.H + 1}), Bm, Cm, D, out), "A must be \\[H\\]");
  EXPECT_DEATH(fwd(x, dt, A, Bm, Cm, Wrap(big, {2}), out), "D must be \\[H\\]");
  EXPECT_DEATH(fwd(x, dt, A, Bm, Cm, D, Wrap(big, {c.B, c.T, c.H, c.P + 1})),
               "y must be shaped like x");
  EXPECT_DEATH(fwd(x, dt, A, Bm, Cm, D, out, 0), "chunk must be");
  EXPECT_DEATH(fwd(x, dt, A, Bm, Cm, D, Tensor::Wrap(y.data(), xs, DType::kBF16, Device::Cpu())),
               "y must be f32");
  // Backward: a gradient of the wrong shape.
  std::vector<float> dx(y.size()), ddt(in.dt.size()), dA(c.H), dBm(in.Bm.size()), dCm(in.Cm.size()),
      dD(c.H);
  EXPECT_DEATH(SsdScanBackward(e, out, x, dt, A, Bm, Cm, D, Wrap(dx, xs), Wrap(ddt, dts),
                               Wrap(big, {c.G}), Wrap(dBm, bs), Wrap(dCm, bs), Wrap(dD, hs)),
               "SsdScanBackward: dA must be shaped like A");
  EXPECT_DEATH(
      SsdScanBackward(e, out, x, dt, A, Bm, Cm, D, Wrap(dx, xs), Wrap(ddt, dts), Wrap(dA, hs),
                      Wrap(dCm, {c.B, c.T, c.G * c.N}), Wrap(dCm, bs), Wrap(dD, hs)),
      "dBm must be shaped like Bm");
}

// Tensors tagged as CUDA (never dereferenced): the CUDA path checks its
// limits (N ≤ 256) before it launches anything. The numerics: ssm_gpu_test.
TEST(SsdScanDeathTest, CudaRejectsTooLargeAState) {
  const Case c{1, 2, 2, 4, 1, 300, 16};
  Inputs<float> in = MakeInputs(c, 8);
  std::vector<float> y(Numel(c, c.P, c.H));
  const Device gpu = Device::Cuda(0);
  auto on_gpu = [&](std::vector<float>& v, const Shape& s) {
    return Tensor::Wrap(v.data(), s, DType::kF32, gpu);
  };
  Exec e;
  e.device = gpu;
  EXPECT_DEATH(SsdScanForward(e, on_gpu(in.x, {c.B, c.T, c.H, c.P}), on_gpu(in.dt, {c.B, c.T, c.H}),
                              on_gpu(in.A, {c.H}), on_gpu(in.Bm, {c.B, c.T, c.G, c.N}),
                              on_gpu(in.Cm, {c.B, c.T, c.G, c.N}), on_gpu(in.D, {c.H}),
                              on_gpu(y, {c.B, c.T, c.H, c.P})),
               "CUDA takes N ≤ 256");
}

// kAuto's choice (host logic, no GPU needed): kChunkedMma in both
// directions wherever it fits, P and N up to 64 (the shapes measured faster,
// ssd_scan.h); wider states keep the recurrence forward and, where the
// chunked kernels fit and P·N ≤ 256 (none of these), the chunked backward; a
// shape neither chunked form can take (P·N = 102400) never gets them.
TEST(SsdAutoKernel, ChoosesByDirectionAndStateSize) {
  for (bool bwd : {false, true}) {
    EXPECT_EQ(SsdAutoKernel(bwd, 16, 16, 128), SsdCudaKernel::kChunkedMma);
    EXPECT_EQ(SsdAutoKernel(bwd, 16, 16, 1), SsdCudaKernel::kChunkedMma);
    EXPECT_EQ(SsdAutoKernel(bwd, 8, 32, 128), SsdCudaKernel::kChunkedMma);
    EXPECT_EQ(SsdAutoKernel(bwd, 16, 17, 128), SsdCudaKernel::kChunkedMma);
    EXPECT_EQ(SsdAutoKernel(bwd, 64, 64, 128), SsdCudaKernel::kChunkedMma);
    EXPECT_EQ(SsdAutoKernel(bwd, 1, 1, 128), SsdCudaKernel::kChunkedMma);
    EXPECT_EQ(SsdAutoKernel(bwd, 64, 128, 128), SsdCudaKernel::kRecurrence);
    EXPECT_EQ(SsdAutoKernel(bwd, 65, 16, 128), SsdCudaKernel::kRecurrence);
    EXPECT_EQ(SsdAutoKernel(bwd, 400, 256, 4), SsdCudaKernel::kRecurrence);
  }
  // P·N ≤ 256 but N past 64: the chunked backward, the recurrence forward.
  EXPECT_EQ(SsdAutoKernel(true, 2, 128, 128), SsdCudaKernel::kChunked);
  EXPECT_EQ(SsdAutoKernel(false, 2, 128, 128), SsdCudaKernel::kRecurrence);
}

// kChunkedMma (and kChunkedMmaBf16, the same kernels with bf16 products)
// pads P and N to 16, 32 or 64 (ssd_mma_common.cuh MmaWidth): every shape up
// to 64 fits, at any chunk (it takes 64 or 32 steps), nothing wider.
TEST(SsdCudaKernelFits, ChunkedMmaTakesPAndNUpTo64) {
  for (SsdCudaKernel k : {SsdCudaKernel::kChunkedMma, SsdCudaKernel::kChunkedMmaBf16}) {
    for (bool bwd : {false, true}) {
      EXPECT_TRUE(SsdCudaKernelFits(k, bwd, 16, 16, 128));
      EXPECT_TRUE(SsdCudaKernelFits(k, bwd, 1, 1, 1));
      EXPECT_TRUE(SsdCudaKernelFits(k, bwd, 5, 7, 16));
      EXPECT_TRUE(SsdCudaKernelFits(k, bwd, 64, 64, 128));
      EXPECT_FALSE(SsdCudaKernelFits(k, bwd, 65, 16, 128));
      EXPECT_FALSE(SsdCudaKernelFits(k, bwd, 16, 128, 128));
      // Its chunk length: 64 steps where chunk ≥ 64 and max(P, N) is in
      // 17..32, else 32 (width 16 takes 32-step chunks: they were faster).
      EXPECT_EQ(SsdCudaChunkLength(k, bwd, 16, 16, 128), 32);
      EXPECT_EQ(SsdCudaChunkLength(k, bwd, 32, 20, 64), 64);
      EXPECT_EQ(SsdCudaChunkLength(k, bwd, 16, 16, 63), 32);
      EXPECT_EQ(SsdCudaChunkLength(k, bwd, 16, 16, 1), 32);
      EXPECT_EQ(SsdCudaChunkLength(k, bwd, 64, 64, 128), 32);
      EXPECT_EQ(SsdCudaChunkLength(k, bwd, 16, 33, 128), 32);
      EXPECT_EQ(SsdCudaChunkLength(k, bwd, 65, 16, 128), 0);
    }
  }
}

}  // namespace
}  // namespace gtp::kernels::ssm
