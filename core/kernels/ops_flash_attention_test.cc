// Tests of ops::FlashAttentionForward/Backward on token-strided views (CPU):
// q, k, v and dq, dk, dv as column blocks of one packed [B·T, R] matrix, the
// layout a fused QKV GEMM writes, give the bits of the contiguous call on the
// same values, write no column outside their views, and views of any other
// layout abort naming the tensor; ops::Rope* likewise. The kernels themselves are tested in
// cpu/flash_attention_test.cc; the CUDA paths in cuda/cudnn_attention_gpu_test.cc.
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/allocator.h"
#include "core/kernels/ops.h"
#include "core/kernels/testing/harness.h"
#include "core/tensor.h"
#include "gtest/gtest.h"

namespace gtp::kernels {
namespace {

using testing::NaNs;
using testing::Rng;
using testing::SameBytes;
using testing::ToBF16;

template <typename T>
Tensor Wrap(std::vector<T>& v, const Shape& s) {
  return Tensor::Wrap(v.data(), s, DTypeOf<T>::value, Device::Cpu());
}

template <typename T>
std::vector<T> Values(Rng& rng, size_t n) {
  if constexpr (std::is_same_v<T, bf16>) {
    return ToBF16(rng.Normal(n));
  } else {
    return rng.Normal(n);
  }
}

template <typename T>
std::vector<T> Poison(size_t n) {
  if constexpr (std::is_same_v<T, bf16>) {
    return ToBF16(NaNs(n));
  } else {
    return NaNs(n);
  }
}

// What packed columns outside the views hold; the backward must leave it.
template <typename T>
T Sentinel() {
  if constexpr (std::is_same_v<T, bf16>) {
    return ToBF16({-96.5f})[0];
  } else {
    return -96.5f;
  }
}

struct Case {
  int64_t B, T, NH, NKV, HS;
  bool causal;
  int64_t extra_heads;  // an unused column block of this many heads after v
  std::string Describe() const {
    return absl::StrCat("B=", B, " T=", T, " NH=", NH, " NKV=", NKV, " HS=", HS,
                        causal ? " causal" : " bidirectional", " extra heads ", extra_heads);
  }
};

// Which of q, k, v, dq, dk, dv the strided call takes as packed views (the
// others as separate contiguous tensors).
enum Packed : unsigned { kQ = 1, kK = 2, kV = 4, kDQ = 8, kDK = 16, kDV = 32, kAll = 63 };

// A packed [B·T, R] matrix, R = (NH + 2·NKV + extra)·HS: row n is token n's
// [q heads | k heads | v heads | extra].
struct Layout {
  int64_t B, T, HS, R, k_col, v_col, extra_col;
  explicit Layout(const Case& c)
      : B(c.B),
        T(c.T),
        HS(c.HS),
        R((c.NH + 2 * c.NKV + c.extra_heads) * c.HS),
        k_col(c.NH * c.HS),
        v_col((c.NH + c.NKV) * c.HS),
        extra_col((c.NH + 2 * c.NKV) * c.HS) {}
  // The [B, T, heads, HS] view at column `col` of the packed matrix m.
  Tensor Heads(const Tensor& m, int64_t col, int64_t heads) const {
    return m.Strided({B, T, heads, HS}, {T * R, R, HS, 1}, col);
  }
  // Columns [col, col + width) of every row, densely.
  template <typename T_>
  std::vector<T_> Columns(const std::vector<T_>& m, int64_t col, int64_t width) const {
    std::vector<T_> d(B * T * width);
    if (d.empty()) return d;  // no columns (memcpy's pointers must not be null)
    for (int64_t n = 0; n < B * T; ++n) {
      std::memcpy(d.data() + n * width, m.data() + n * R + col, width * sizeof(T_));
    }
    return d;
  }
};

// The strided call (the tensors `packed` names as views of a packed QKV
// matrix and of a packed gradient matrix filled with a sentinel) against the
// contiguous call on copies of the same values: every output bit for bit,
// the inputs untouched, the gradient matrix's other columns at the sentinel.
template <typename T>
void CheckPackedMatchesDense(const Exec& e, const Case& c, unsigned packed, Rng& rng) {
  SCOPED_TRACE(absl::StrCat(c.Describe(), " packed mask ", packed));
  const Layout l(c);
  const int64_t B = c.B, Tn = c.T, NH = c.NH, NKV = c.NKV, HS = c.HS;
  const Shape qs{B, Tn, NH, HS}, kvs{B, Tn, NKV, HS}, lses{B, NH, Tn};
  const size_t nq = B * Tn * NH * HS, nkv = B * Tn * NKV * HS, nlse = B * NH * Tn;

  std::vector<T> qkv = Values<T>(rng, B * Tn * l.R);
  const std::vector<T> qkv_before = qkv;
  std::vector<T> q = l.Columns(qkv, 0, NH * HS), k = l.Columns(qkv, l.k_col, NKV * HS),
                 v = l.Columns(qkv, l.v_col, NKV * HS), dout = Values<T>(rng, nq);

  // The contiguous call.
  std::vector<T> out_ref = Poison<T>(nq), dq_ref = Poison<T>(nq), dk_ref = Poison<T>(nkv),
                 dv_ref = Poison<T>(nkv);
  std::vector<float> lse_ref = NaNs(nlse);
  ops::FlashAttentionForward(e, Wrap(q, qs), Wrap(k, kvs), Wrap(v, kvs), Wrap(out_ref, qs),
                             Wrap(lse_ref, lses), c.causal);
  ops::FlashAttentionBackward(e, Wrap(dout, qs), Wrap(q, qs), Wrap(k, kvs), Wrap(v, kvs),
                              Wrap(out_ref, qs), Wrap(lse_ref, lses), Wrap(dq_ref, qs),
                              Wrap(dk_ref, kvs), Wrap(dv_ref, kvs), c.causal);

  // The strided call: views where `packed` says, separate copies elsewhere.
  const Tensor P = Wrap(qkv, {B * Tn, l.R});
  std::vector<T> q2 = q, k2 = k, v2 = v;
  const Tensor qt = (packed & kQ) ? l.Heads(P, 0, NH) : Wrap(q2, qs);
  const Tensor kt = (packed & kK) ? l.Heads(P, l.k_col, NKV) : Wrap(k2, kvs);
  const Tensor vt = (packed & kV) ? l.Heads(P, l.v_col, NKV) : Wrap(v2, kvs);
  std::vector<T> out = Poison<T>(nq);
  std::vector<float> lse = NaNs(nlse);
  ops::FlashAttentionForward(e, qt, kt, vt, Wrap(out, qs), Wrap(lse, lses), c.causal);
  EXPECT_TRUE(SameBytes(out, out_ref)) << "out";
  EXPECT_TRUE(SameBytes(lse, lse_ref)) << "lse";

  std::vector<T> dqkv(B * Tn * l.R, Sentinel<T>());
  const Tensor G = Wrap(dqkv, {B * Tn, l.R});
  std::vector<T> dq2 = Poison<T>(nq), dk2 = Poison<T>(nkv), dv2 = Poison<T>(nkv);
  const Tensor dqt = (packed & kDQ) ? l.Heads(G, 0, NH) : Wrap(dq2, qs);
  const Tensor dkt = (packed & kDK) ? l.Heads(G, l.k_col, NKV) : Wrap(dk2, kvs);
  const Tensor dvt = (packed & kDV) ? l.Heads(G, l.v_col, NKV) : Wrap(dv2, kvs);
  ops::FlashAttentionBackward(e, Wrap(dout, qs), qt, kt, vt, Wrap(out, qs), Wrap(lse, lses), dqt,
                              dkt, dvt, c.causal);
  EXPECT_TRUE(SameBytes((packed & kDQ) ? l.Columns(dqkv, 0, NH * HS) : dq2, dq_ref)) << "dq";
  EXPECT_TRUE(SameBytes((packed & kDK) ? l.Columns(dqkv, l.k_col, NKV * HS) : dk2, dk_ref)) << "dk";
  EXPECT_TRUE(SameBytes((packed & kDV) ? l.Columns(dqkv, l.v_col, NKV * HS) : dv2, dv_ref)) << "dv";

  // Columns no view covers keep the sentinel: the extra block, and the
  // blocks of gradients that went to separate tensors.
  const T s = Sentinel<T>();
  auto untouched = [&](int64_t col, int64_t width) {
    return SameBytes(l.Columns(dqkv, col, width), std::vector<T>(B * Tn * width, s));
  };
  EXPECT_TRUE(untouched(l.extra_col, c.extra_heads * HS)) << "extra columns";
  EXPECT_TRUE((packed & kDQ) || untouched(0, NH * HS)) << "dq columns";
  EXPECT_TRUE((packed & kDK) || untouched(l.k_col, NKV * HS)) << "dk columns";
  EXPECT_TRUE((packed & kDV) || untouched(l.v_col, NKV * HS)) << "dv columns";
  EXPECT_TRUE(SameBytes(qkv, qkv_before)) << "the packed inputs changed";
}

// MHA and GQA, causal and not, with and without an unused column block, on
// T > 1 and on T = 1 (each batch one token) and B = 1.
template <typename T>
void CheckAllPackedCases() {
  HeapAllocator host;
  const Exec e = Exec::Cpu(host);
  Rng rng(17);
  for (const auto& [B, Tn] : {std::pair<int64_t, int64_t>{2, 5}, {3, 1}, {1, 7}}) {
    for (const auto& [NH, NKV] : {std::pair<int64_t, int64_t>{4, 4}, {4, 2}}) {
      for (const bool causal : {true, false}) {
        for (const int64_t extra : {0, 1}) {
          CheckPackedMatchesDense<T>(e, Case{B, Tn, NH, NKV, 8, causal, extra}, kAll, rng);
        }
      }
    }
  }
}

TEST(FlashAttentionOps, PackedQkvViewsMatchTheDenseCallF32) { CheckAllPackedCases<float>(); }

TEST(FlashAttentionOps, PackedQkvViewsMatchTheDenseCallBf16) { CheckAllPackedCases<bf16>(); }

// Some tensors packed, some contiguous (different token strides): each
// strided one is copied densely, each gradient view written back alone.
TEST(FlashAttentionOps, MixedLayoutsMatchTheDenseCall) {
  HeapAllocator host;
  const Exec e = Exec::Cpu(host);
  Rng rng(18);
  for (const unsigned packed : {unsigned{kK | kV | kDQ | kDV}, unsigned{kQ | kDK}, unsigned{kQ}}) {
    CheckPackedMatchesDense<float>(e, Case{2, 6, 4, 2, 8, true, 1}, packed, rng);
    CheckPackedMatchesDense<bf16>(e, Case{2, 6, 4, 4, 8, false, 0}, packed, rng);
  }
}

TEST(FlashAttentionOpsDeathTest, RefusesViewsThatAreNotTokenStrided) {
  HeapAllocator host;
  const Exec e = Exec::Cpu(host);
  constexpr int64_t B = 2, T = 4, NH = 2, HS = 8, R = 3 * NH * HS;
  std::vector<float> m(B * T * R, 0.0f), out(B * T * NH * HS), lse(B * NH * T);
  std::vector<float> g(B * T * R);
  const Tensor P = Wrap(m, {B * T, R}), G = Wrap(g, {B * T, R});
  const Tensor ok = P.Strided({B, T, NH, HS}, {T * R, R, HS, 1});
  const Tensor okg = G.Strided({B, T, NH, HS}, {T * R, R, HS, 1});
  const Tensor o = Wrap(out, {B, T, NH, HS}), l = Wrap(lse, {B, NH, T});
  // Rows overlap (a token stride below heads·HS).
  const Tensor overlapping = P.Strided({B, T, NH, HS}, {T * HS, HS, HS, 1});
  EXPECT_DEATH(ops::FlashAttentionForward(e, overlapping, ok, ok, o, l),
               "FlashAttentionForward: q .* is neither contiguous nor token-strided");
  // Heads not HS apart.
  const Tensor spread = P.Strided({B, T, NH, HS}, {T * R, R, 2 * HS, 1});
  EXPECT_DEATH(ops::FlashAttentionForward(e, ok, ok, spread, o, l),
               "FlashAttentionForward: v .* is neither contiguous nor token-strided");
  // Batches not T·rs apart.
  const Tensor gapped = G.Strided({B, T - 1, NH, HS}, {T * R, R, HS, 1});
  const Tensor ok3 = P.Strided({B, T - 1, NH, HS}, {T * R - R, R, HS, 1});
  std::vector<float> out3((T - 1) * B * NH * HS), lse3(B * NH * (T - 1));
  const Tensor o3 = Wrap(out3, {B, T - 1, NH, HS}), l3 = Wrap(lse3, {B, NH, T - 1});
  EXPECT_DEATH(ops::FlashAttentionBackward(e, o3, ok3, ok3, ok3, o3, l3, ok3, gapped, ok3),
               "FlashAttentionBackward: dk .* is neither contiguous nor token-strided");
  // out, dout and lse stay contiguous.
  EXPECT_DEATH(ops::FlashAttentionBackward(e, ok, ok, ok, ok, o, l, okg, okg, okg),
               "dout must be contiguous");
}

// ops::RopeForward/Backward on token-strided heads (q and k in place in the
// packed matrix, one call): the dense call's bytes in the block, every other
// column untouched.
TEST(RopeOps, TokenStridedHeadsMatchTheDenseCall) {
  HeapAllocator host;
  const Exec e = Exec::Cpu(host);
  constexpr int64_t B = 2, T = 5, NH = 4, NKV = 2, HS = 8, R = (NH + 2 * NKV) * HS;
  Rng rng(21);
  for (const bool backward : {false, true}) {
    std::vector<bf16> m = ToBF16(rng.Normal(B * T * R));
    const std::vector<bf16> before = m;
    const Layout l(Case{B, T, NH, NKV, HS, true, 0});
    std::vector<bf16> dense = l.Columns(m, 0, (NH + NKV) * HS);
    const Tensor qk = l.Heads(Wrap(m, {B * T, R}), 0, NH + NKV);
    const Tensor d = Wrap(dense, {B, T, NH + NKV, HS});
    if (backward) {
      ops::RopeBackward(e, qk, qk, 500.0f);
      ops::RopeBackward(e, d, d, 500.0f);
    } else {
      ops::RopeForward(e, qk, qk, 500.0f);
      ops::RopeForward(e, d, d, 500.0f);
    }
    EXPECT_TRUE(SameBytes(l.Columns(m, 0, (NH + NKV) * HS), dense)) << "q, k";
    EXPECT_TRUE(SameBytes(l.Columns(m, l.v_col, NKV * HS), l.Columns(before, l.v_col, NKV * HS)))
        << "v untouched";
    EXPECT_FALSE(SameBytes(m, before)) << "nothing rotated";
  }
}

TEST(RopeOpsDeathTest, RefusesDifferentLayoutsOfInputAndOutput) {
  HeapAllocator host;
  const Exec e = Exec::Cpu(host);
  constexpr int64_t B = 2, T = 4, NH = 2, HS = 8, R = 3 * NH * HS;
  std::vector<float> m(B * T * R, 0.0f), y(B * T * NH * HS);
  const Tensor x = Wrap(m, {B * T, R}).Strided({B, T, NH, HS}, {T * R, R, HS, 1});
  EXPECT_DEATH(ops::RopeForward(e, x, Wrap(y, {B, T, NH, HS}), 10000.0f),
               "RopeForward: x and y must have one row stride");
}

}  // namespace
}  // namespace gtp::kernels
