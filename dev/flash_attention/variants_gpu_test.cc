// GPU tests of the backward experiments in variants.cu (the modes meant to be
// right) and of core's FlashAttentionBackwardSeparateDq, against the double
// reference on bf16-rounded inputs, and run to run. Modes 1, 2 and 8 compute
// a wrong dq on purpose (timing only) and are not tested.
#include <cuda_runtime_api.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cuda_runtime.h"
#include "core/kernels/cuda.h"
#include "core/kernels/testing/gpu.h"
#include "core/kernels/testing/harness.h"
#include "core/kernels/testing/reference.h"
#include "dev/flash_attention/variants.h"
#include "gtest/gtest.h"

namespace gtp::kernels::testing {
namespace {

struct Shape {
  int64_t B, T, NH, NKV, HS;
  size_t q() const { return B * T * NH * HS; }
  size_t kv() const { return B * T * NKV * HS; }
  size_t rows() const { return B * NH * T; }
};

std::string Describe(const Shape& s) {
  return absl::StrCat("B=", s.B, " T=", s.T, " NH=", s.NH, " NKV=", s.NKV, " HS=", s.HS);
}

// Random bf16 inputs of one shape, the forward's out/lse, and the double
// reference gradients.
struct Case {
  Shape s;
  std::vector<float> q, k, v, dout;
  DeviceBuffer<bf16> qd, kd, vd, gd, out, dq, dk, dv;
  DeviceBuffer<float> lse;
  std::vector<double> rdq, rdk, rdv;

  Case(const Shape& shape, Rng& rng, cudaStream_t stream)
      : s(shape),
        q(RoundToBF16(rng.Normal(s.q()))),
        k(RoundToBF16(rng.Normal(s.kv()))),
        v(RoundToBF16(rng.Normal(s.kv()))),
        dout(RoundToBF16(rng.Normal(s.q()))),
        qd(ToBF16(q)),
        kd(ToBF16(k)),
        vd(ToBF16(v)),
        gd(ToBF16(dout)),
        out(s.q()),
        dq(s.q()),
        dk(s.kv()),
        dv(s.kv()),
        lse(s.rows()) {
    cuda::FlashAttentionForward(qd.get(), kd.get(), vd.get(), out.get(), lse.get(), s.B, s.T, s.NH,
                                s.NKV, s.HS, stream);
    GTP_CUDA_CHECK(cudaStreamSynchronize(stream));
    RefAttentionBackward(ToDouble(q), ToDouble(k), ToDouble(v), ToDouble(dout), s.B, s.T, s.NH,
                         s.NKV, s.HS, &rdq, &rdk, &rdv);
  }

  // Runs backward(dout, q, k, v, out, lse, dq, dk, dv) twice: the first
  // result against the reference, the second for bit equality with the first.
  template <typename Backward>
  void Check(cudaStream_t stream, const Backward& backward) {
    std::vector<bf16> first[3];
    for (int rep = 0; rep < 2; ++rep) {
      for (auto* b : {&dq, &dk, &dv}) b->Poison();
      backward(gd.get(), qd.get(), kd.get(), vd.get(), out.get(), lse.get(), dq.get(), dk.get(),
               dv.get());
      GTP_CUDA_CHECK(cudaStreamSynchronize(stream));
      const std::vector<bf16> g[3] = {dq.Download(), dk.Download(), dv.Download()};
      if (rep == 0) {
        for (int i = 0; i < 3; ++i) first[i] = g[i];
        EXPECT_TRUE(RelClose(ToFloat(g[0]), rdq, 1e-2)) << "dq";
        EXPECT_TRUE(RelClose(ToFloat(g[1]), rdk, 1e-2)) << "dk";
        EXPECT_TRUE(RelClose(ToFloat(g[2]), rdv, 1e-2)) << "dv";
      } else {
        for (int i = 0; i < 3; ++i) EXPECT_TRUE(BitEqual(g[i], first[i])) << "run to run " << i;
      }
    }
  }
};

// The candidate backward variants (the real ones: 0 fused dq, 6/11 merged launch,
// 9 capped dk/dv, 10/12 fused capped) against the double reference, and run to run.
TEST(FlashAttentionVariantsGpu, BackwardVariantsMatchReference) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  Rng rng(73);
  for (const Shape& s : {Shape{2, 17, 3, 3, 64}, Shape{1, 129, 8, 2, 64}, Shape{1, 1000, 2, 1, 64},
                         Shape{2, 300, 4, 4, 64}}) {
    SCOPED_TRACE(Describe(s));
    Case c(s, rng, stream.get());
    DeviceBuffer<uint8_t> scratch(
        static_cast<size_t>(cuda::FlashAttentionBackwardVariantScratchBytes(s.B, s.T, s.NH, s.HS)));
    for (int mode : {0, 6, 9, 10, 11, 12}) {
      SCOPED_TRACE(absl::StrCat("mode ", mode));
      c.Check(stream.get(), [&](const bf16* dout, const bf16* q, const bf16* k, const bf16* v,
                                const bf16* out, const float* lse, bf16* dq, bf16* dk, bf16* dv) {
        cuda::FlashAttentionBackwardFusedDqVariant(mode, dout, q, k, v, out, lse, dq, dk, dv,
                                                   scratch.get(), s.B, s.T, s.NH, s.NKV, s.HS,
                                                   stream.get());
      });
    }
  }
}

// The previous three-kernel backward the benchmark times against the shipped one.
TEST(FlashAttentionVariantsGpu, SeparateDqMatchesReference) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << NoGpuReason();
  Stream stream = TestStream();
  Rng rng(74);
  for (const Shape& s :
       {Shape{2, 17, 3, 3, 64}, Shape{1, 1000, 2, 1, 64}, Shape{2, 129, 4, 2, 128}}) {
    SCOPED_TRACE(Describe(s));
    Case c(s, rng, stream.get());
    DeviceBuffer<uint8_t> scratch(
        static_cast<size_t>(cuda::FlashAttentionBackwardScratchBytes(s.B, s.T, s.NH, s.NKV, s.HS)));
    c.Check(stream.get(), [&](const bf16* dout, const bf16* q, const bf16* k, const bf16* v,
                              const bf16* out, const float* lse, bf16* dq, bf16* dk, bf16* dv) {
      cuda::FlashAttentionBackwardSeparateDq(dout, q, k, v, out, lse, dq, dk, dv, scratch.get(),
                                             s.B, s.T, s.NH, s.NKV, s.HS, stream.get());
    });
  }
}

}  // namespace
}  // namespace gtp::kernels::testing
