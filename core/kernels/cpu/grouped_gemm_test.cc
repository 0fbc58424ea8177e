// Tests of cpu::GroupedGemm against a double-precision reference per group
// (RefGemm, a triple loop): every transpose, every supported type
// combination, beta 0 (C poisoned with NaN: never read) and 1, and groups of
// different sizes, m == 0, n == 0 and k == 0 ones included; plus the
// contract checks of the shared GemmDesc.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/kernels/cpu.h"
#include "core/kernels/testing/harness.h"
#include "core/kernels/testing/reference.h"
#include "gtest/gtest.h"

namespace gtp::kernels::testing {
namespace {

struct Size {
  int64_t m, n, k;
};

// Different sizes, odd ones, and every kind of empty group.
const Size kSizes[] = {{3, 5, 7}, {0, 4, 6}, {17, 9, 33},  {4, 0, 3},
                       {5, 6, 0}, {1, 1, 1}, {64, 48, 32}, {2, 257, 5}};


// A group's host data: A, B, C as stored bytes, and the double reference of
// the result (C's initial value where the group writes nothing).
struct Data {
  std::vector<uint8_t> a, b, c;
  std::vector<double> ref;
};

// The buffers of one grouped call, with C of an empty (m or n == 0) group
// holding one sentinel element that must survive.
std::vector<Data> MakeData(const GemmDesc& d, const std::vector<Size>& sizes, Rng& rng) {
  std::vector<Data> out;
  for (const Size& s : sizes) {
    Data g;
    // The reference sees the values as stored (bf16-rounded), so only
    // accumulation and output rounding remain.
    const std::vector<float> a = RoundToBF16(rng.Uniform(s.m * s.k));
    const std::vector<float> b = RoundToBF16(rng.Uniform(s.k * s.n));
    std::vector<float> c = RoundToBF16(rng.Uniform(s.m * s.n));
    if (d.beta == 0.0f) c = NaNs(c.size());
    if (s.m == 0 || s.n == 0) c = {7.0f};
    g.a = StoreAs(a, d.ab_type);
    g.b = StoreAs(b, d.ab_type);
    g.c = StoreAs(c, d.c_type);
    g.ref = ToDouble(c);
    if (s.m > 0 && s.n > 0) {
      RefGemm(d.trans_a, d.trans_b, s.m, s.n, s.k, d.alpha, ToDouble(a), 0, ToDouble(b), 0, d.beta,
              &g.ref, 0);
    }
    out.push_back(std::move(g));
  }
  return out;
}

std::vector<GemmGroup> Groups(const std::vector<Size>& sizes, std::vector<Data>& data) {
  std::vector<GemmGroup> groups;
  for (size_t i = 0; i < sizes.size(); ++i) {
    GemmGroup p;
    p.m = sizes[i].m, p.n = sizes[i].n, p.k = sizes[i].k;
    // k == 0: A and B must not be read, so none are given.
    p.a = p.k > 0 ? data[i].a.data() : nullptr;
    p.b = p.k > 0 ? data[i].b.data() : nullptr;
    p.c = data[i].c.data();
    groups.push_back(p);
  }
  return groups;
}

void ExpectMatches(const GemmDesc& d, const std::vector<Size>& sizes,
                   const std::vector<Data>& data) {
  for (size_t i = 0; i < sizes.size(); ++i) {
    SCOPED_TRACE(
        absl::StrCat("group ", i, " m=", sizes[i].m, " n=", sizes[i].n, " k=", sizes[i].k));
    const std::vector<float> got = LoadAs(data[i].c, d.c_type);
    if (sizes[i].m == 0 || sizes[i].n == 0) {
      EXPECT_EQ(got, std::vector<float>{7.0f}) << "an empty group wrote C";
    } else if (d.c_type == DType::kF32) {
      EXPECT_TRUE(RelClose(got, data[i].ref, 1e-5));
    } else {
      EXPECT_TRUE(RelClose(got, data[i].ref, 1e-2));
      EXPECT_TRUE(RoundedOnce(BytesAsBF16(data[i].c), data[i].ref));
    }
  }
}

struct Types {
  DType ab, c;
};
const Types kTypes[] = {
    {DType::kF32, DType::kF32}, {DType::kBF16, DType::kF32}, {DType::kBF16, DType::kBF16}};

TEST(GroupedGemm, MatchesReferenceForAllTransposesTypesAndBetas) {
  Rng rng(1);
  const std::vector<Size> sizes(std::begin(kSizes), std::end(kSizes));
  for (const Types& ty : kTypes) {
    for (int t = 0; t < 4; ++t) {
      for (float beta : {0.0f, 1.0f}) {
        GemmDesc d;
        d.trans_a = t & 1;
        d.trans_b = t & 2;
        d.alpha = 0.75f;
        d.beta = beta;
        d.ab_type = ty.ab;
        d.c_type = ty.c;
        SCOPED_TRACE(absl::StrCat("ta=", d.trans_a, " tb=", d.trans_b, " beta=", beta,
                                  " ab=", DTypeName(ty.ab), " c=", DTypeName(ty.c)));
        std::vector<Data> data = MakeData(d, sizes, rng);
        std::vector<GemmGroup> groups = Groups(sizes, data);
        cpu::GroupedGemm(d, groups.data(), static_cast<int>(groups.size()));
        ExpectMatches(d, sizes, data);
      }
    }
  }
}

TEST(GroupedGemm, KZeroScalesCByBeta) {
  for (DType c_type : {DType::kF32, DType::kBF16}) {
    GemmDesc d;
    d.ab_type = DType::kBF16;
    d.c_type = c_type;
    d.beta = 0.5f;
    std::vector<uint8_t> c = StoreAs({1.0f, -2.0f, 4.0f, 3.0f, 0.25f, 8.0f}, c_type);
    GemmGroup p;
    p.m = 2, p.n = 3, p.k = 0;
    p.c = c.data();
    cpu::GroupedGemm(d, &p, 1);
    EXPECT_EQ(LoadAs(c, c_type), (std::vector<float>{0.5f, -1.0f, 2.0f, 1.5f, 0.125f, 4.0f}));
    d.beta = 0.0f;
    c = StoreAs(NaNs(6), c_type);
    p.c = c.data();
    cpu::GroupedGemm(d, &p, 1);
    EXPECT_EQ(LoadAs(c, c_type), std::vector<float>(6, 0.0f));
  }
}

TEST(GroupedGemm, NoGroupsIsANoOp) {
  GemmDesc d;
  cpu::GroupedGemm(d, nullptr, 0);
}

TEST(GroupedGemm, RejectsPerGemmFieldsInTheSharedDesc) {
  std::vector<float> a(4), b(4), c(4);
  GemmGroup p;
  p.m = p.n = p.k = 2;
  p.a = a.data(), p.b = b.data(), p.c = c.data();
  GemmDesc d;
  d.m = 2;
  EXPECT_DEATH(cpu::GroupedGemm(d, &p, 1), "m = n = k = 0");
  d = GemmDesc();
  d.ldc = 2;
  EXPECT_DEATH(cpu::GroupedGemm(d, &p, 1), "packed");
  d = GemmDesc();
  d.bias = b.data();
  EXPECT_DEATH(cpu::GroupedGemm(d, &p, 1), "no epilogue, bias");
  d = GemmDesc();
  d.epilogue = GemmEpilogue::kGeluAux;
  EXPECT_DEATH(cpu::GroupedGemm(d, &p, 1), "no epilogue, bias");
  d = GemmDesc();
  d.c_type = DType::kBF16;
  EXPECT_DEATH(cpu::GroupedGemm(d, &p, 1), "f32 A/B with a bf16 C");
  d = GemmDesc();
  p.k = -1;
  EXPECT_DEATH(cpu::GroupedGemm(d, &p, 1), "negative size");
  p.k = 2;
  p.c = nullptr;
  EXPECT_DEATH(cpu::GroupedGemm(d, &p, 1), "null C");
}

}  // namespace
}  // namespace gtp::kernels::testing
